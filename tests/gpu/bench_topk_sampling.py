"""Time the one-kernel top-k sampler against the torch path, both replayed from CUDA graphs:
a frame's 8 depformer draws (2048 codes, top-k 250), for each warp count of the kernel. Each
row printed as it is measured; the kernel's tokens are checked against the torch path's.

Usage: python -m tests.gpu.bench_topk_sampling OUT.json
"""
import json
import sys

import torch

from engine.kernels import topk_sampling
from tests.gpu.replay_timing import capture, replay_ms

STEPS, VOCAB, TOP_K, TEMPERATURE = 8, 2048, 250, 0.8


def _torch_path(logits, generator):
    probs = torch.softmax(logits.float() / TEMPERATURE, dim=-1)
    probs, candidates = torch.topk(probs, TOP_K, dim=-1)
    pick = (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(dim=-1, keepdim=True)
    return candidates.gather(-1, pick).view(-1)


def main(out_path):
    logits = (torch.randn(STEPS, 1, VOCAB, device="cuda") * 3).to(torch.bfloat16)
    logits[:, :, :64] = logits[:, :, 64:128]  # ties: equal probabilities ordered by index
    expected = torch.cat([_torch_path(logits[s], torch.Generator("cuda").manual_seed(s)) for s in range(STEPS)])

    def kernel(warps):
        return lambda: [topk_sampling.topk_sample(logits[s], TOP_K, TEMPERATURE, None, num_warps=warps)
                        for s in range(STEPS)]

    # Replays draw from the default generator, which a captured graph advances itself.
    rows = [dict(path="torch", ms=replay_ms(capture(lambda: [_torch_path(logits[s], None) for s in range(STEPS)]),
                                            100))]
    print(f"torch path      {rows[-1]['ms']:.4f} ms for {STEPS} draws", flush=True)
    for warps in (1, 2, 4, 8, 16, 32):
        got = torch.cat([topk_sampling.topk_sample(logits[s], TOP_K, TEMPERATURE,
                                                   torch.Generator("cuda").manual_seed(s), num_warps=warps)
                         for s in range(STEPS)])
        rows.append(dict(path="kernel", num_warps=warps, ms=replay_ms(capture(kernel(warps)), 100),
                         tokens_equal=bool(torch.equal(got, expected))))
        print(f"kernel warps {warps:2d} {rows[-1]['ms']:.4f} ms, tokens equal to torch's: {rows[-1]['tokens_equal']}",
              flush=True)
    with open(out_path, "w") as f:
        json.dump(dict(steps=STEPS, vocab=VOCAB, top_k=TOP_K, device=torch.cuda.get_device_name(), rows=rows), f,
                  indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
