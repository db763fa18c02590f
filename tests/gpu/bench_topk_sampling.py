"""Time the one-kernel top-k sampler against the torch path, both replayed from CUDA graphs:
a frame's 8 depformer draws (2048 codes, top-k 250), for each warp count of the kernel. Each
row printed as it is measured; the kernel's tokens are checked against the torch path's.

Usage: python -m tests.gpu.bench_topk_sampling OUT.json
"""
import json
import sys

import torch

from engine.kernels import topk_sampling

STEPS, VOCAB, TOP_K, TEMPERATURE = 8, 2048, 250, 0.8


def _replay_ms(fn, replays=100) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _torch_path(logits, generator):
    probs = torch.softmax(logits.float() / TEMPERATURE, dim=-1)
    probs, candidates = torch.topk(probs, TOP_K, dim=-1)
    pick = (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(dim=-1, keepdim=True)
    return candidates.gather(-1, pick).view(-1)


def main(out_path):
    logits = (torch.randn(STEPS, 1, VOCAB, device="cuda") * 3).to(torch.bfloat16)
    logits[:, :, :64] = logits[:, :, 64:128]  # ties: equal probabilities ordered by index
    expected = torch.cat([_torch_path(logits[s], torch.Generator("cuda").manual_seed(s)) for s in range(STEPS)])
    rows = []  # replays draw from the default generator, which a captured graph advances itself
    rows.append(dict(path="torch", ms=_replay_ms(lambda: [_torch_path(logits[s], None) for s in range(STEPS)])))
    print(f"torch path      {rows[-1]['ms']:.4f} ms for {STEPS} draws", flush=True)
    for warps in (1, 2, 4, 8, 16, 32):
        got = torch.cat([topk_sampling.topk_sample(logits[s], TOP_K, TEMPERATURE,
                                                   torch.Generator("cuda").manual_seed(s), num_warps=warps)
                         for s in range(STEPS)])
        ms = _replay_ms(lambda w=warps: [topk_sampling.topk_sample(logits[s], TOP_K, TEMPERATURE, None, num_warps=w)
                                         for s in range(STEPS)])
        rows.append(dict(path="kernel", num_warps=warps, ms=ms, tokens_equal=bool(torch.equal(got, expected))))
        print(f"kernel warps {warps:2d} {ms:.4f} ms, tokens equal to torch's: {rows[-1]['tokens_equal']}", flush=True)
    with open(out_path, "w") as f:
        json.dump(dict(steps=STEPS, vocab=VOCAB, top_k=TOP_K, device=torch.cuda.get_device_name(), rows=rows), f,
                  indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
