"""Top-k sampling of one row of logits in one kernel, for vocabularies up to MAX_VOCAB.

The torch path (engine.ops.sampling) is softmax, a full top-k (a radix sort on CUDA), a
gather and an argmax: several kernels per codebook. Here one program per row takes the
softmax, sorts the probabilities in registers (a bitonic sort of (probability, index) keys:
descending probability, ties to the lower index, the order torch.topk returns) and runs the
exponential race over the k best with the exponentials the caller drew from the session's
generator in that same order. The random numbers are the ones the torch path draws, so a
replayed graph and an eager call draw alike.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import MAX_VOCAB, overlap


@triton.jit(do_not_specialize=["top_k"])  # one kernel for every top-k: a change mid-conversation compiles nothing
def _topk_race_kernel(LOGITS, EXPO, OUT, V, top_k, temperature, sl, se, BV: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    row = tl.program_id(0)
    idx = tl.arange(0, BV)
    ok = idx < V
    z = tl.load(LOGITS + row * sl + idx, mask=ok, other=float("-inf")).to(tl.float32) / temperature
    e = tl.exp(z - tl.max(z, axis=0))
    p = e / tl.sum(e, axis=0)  # >= 0: its bits order as the values do
    key = (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (BV - 1 - idx).to(tl.int64)
    key = tl.sort(key, descending=True)
    rank = idx
    prob = (key >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    token = (BV - 1 - (key & 0xFFFFFFFF)).to(tl.int64)
    draw = tl.load(EXPO + row * se + rank, mask=rank < top_k, other=1.0)
    race = tl.where(rank < top_k, prob / draw, -1.0)
    best = tl.argmax(race, axis=0)
    tl.store(OUT + row, tl.sum(tl.where(rank == best, token, 0), axis=0))


NUM_WARPS = 32


def topk_sample(logits: torch.Tensor, top_k: int, temperature: float,
                generator: torch.Generator | None, *, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """logits [R, V] (V <= MAX_VOCAB) -> tokens [R] int64; draws [R, top_k] exponentials.
    `num_warps` is a tuning knob for tests/gpu/bench_topk_sampling.py."""
    R, V = logits.shape
    if V > MAX_VOCAB or not 0 < top_k <= V:
        raise ValueError(f"topk_sample: vocabulary {V}, top-k {top_k}")
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    draws = torch.empty(R, top_k, dtype=torch.float32, device=logits.device).exponential_(1, generator=generator)
    out = torch.empty(R, dtype=torch.int64, device=logits.device)
    _topk_race_kernel[(R,)](logits, draws, out, V, top_k, temperature, logits.stride(0), draws.stride(0),
                            BV=triton.next_power_of_2(V), num_warps=num_warps, **overlap.launch(logits.device))
    return out
