"""Time the one-kernel top-k sampler against the torch path, both replayed from CUDA graphs: a
frame's 8 depformer draws (2048 codes, top-k 250: the sorting kernel) and its text draw (32000
tokens, top-k 25: the extracting kernel), for each warp count of the kernel. Each row printed
as it is measured; the kernel's tokens are checked against the torch path's.

Usage: python -m tests.gpu.bench_topk_sampling OUT.json
"""
import json
import sys

import torch

from engine.kernels import topk_sampling
from tests.gpu.replay_timing import capture, replay_ms

TEMPERATURE = 0.8
CASES = {"codebooks": (8, 2048, 250), "text": (1, 32000, 25)}  # draws a frame, vocabulary, top-k


def _torch_path(logits, top_k, generator):
    probs = torch.softmax(logits.float() / TEMPERATURE, dim=-1)
    probs, candidates = torch.topk(probs, top_k, dim=-1)
    pick = (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(dim=-1, keepdim=True)
    return candidates.gather(-1, pick).view(-1)


def bench(name, steps, vocab, top_k):
    logits = (torch.randn(steps, 1, vocab, device="cuda") * 3).to(torch.bfloat16)
    logits[:, :, :64] = logits[:, :, 64:128]  # ties: equal probabilities ordered by index
    expected = torch.cat([_torch_path(logits[s], top_k, torch.Generator("cuda").manual_seed(s))
                          for s in range(steps)])

    def kernel(warps):
        return lambda: [topk_sampling.topk_sample(logits[s], top_k, TEMPERATURE, None, num_warps=warps)
                        for s in range(steps)]

    # Replays draw from the default generator, which a captured graph advances itself.
    graph = capture(lambda: [_torch_path(logits[s], top_k, None) for s in range(steps)])
    rows = [dict(case=name, steps=steps, vocab=vocab, top_k=top_k, path="torch", ms=replay_ms(graph, 100))]
    print(f"{name:9} torch path      {rows[-1]['ms']:.4f} ms for {steps} draws", flush=True)
    for warps in (1, 2, 4, 8, 16, 32):
        got = torch.cat([topk_sampling.topk_sample(logits[s], top_k, TEMPERATURE,
                                                   torch.Generator("cuda").manual_seed(s), num_warps=warps)
                         for s in range(steps)])
        rows.append(dict(case=name, steps=steps, vocab=vocab, top_k=top_k, path="kernel", num_warps=warps,
                         ms=replay_ms(capture(kernel(warps)), 100), tokens_equal=bool(torch.equal(got, expected))))
        print(f"{name:9} kernel warps {warps:2d} {rows[-1]['ms']:.4f} ms, tokens equal to torch's: "
              f"{rows[-1]['tokens_equal']}", flush=True)
    return rows


def main(out_path):
    rows = [row for name, case in CASES.items() for row in bench(name, *case)]
    with open(out_path, "w") as f:
        json.dump(dict(command="python3 -m tests.gpu.bench_topk_sampling OUT.json",
                       device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
