"""Top-k sampling of one row of logits in one kernel: for vocabularies up to MAX_VOCAB (the
audio codebooks' 2048, top-k 250) by sorting the row, for larger ones with a small k (the text
vocabulary's 32000, top-k 25) by taking the k best one at a time.

The torch path (engine.ops.sampling) is softmax, a full top-k (a radix sort on CUDA), a
gather and an argmax: several kernels per codebook, about fifteen for the text token. Here one
program per row takes the softmax, ranks the probabilities as (probability, index) keys
(descending probability, ties to the lower index, the order torch.topk returns) and runs the
exponential race over the k best with the exponentials the caller drew from the session's
generator in that same order. The sort is a bitonic sort of the whole row in registers; the
extraction is k maxima over the row, each key taken out once it is ranked. The random numbers
are the ones the torch path draws, so a replayed graph and an eager call draw alike.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import MAX_VOCAB, one_kernel_serves, overlap


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


@triton.jit(do_not_specialize=["top_k"])
def _topk_extract_kernel(LOGITS, EXPO, OUT, V, top_k, temperature, sl, se, BV: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    row = tl.program_id(0)
    idx = tl.arange(0, BV)
    ok = idx < V
    z = tl.load(LOGITS + row * sl + idx, mask=ok, other=float("-inf")).to(tl.float32) / temperature
    e = tl.exp(z - tl.max(z, axis=0))
    p = e / tl.sum(e, axis=0)
    key = (p.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (BV - 1 - idx).to(tl.int64)
    key = tl.where(ok, key, -1)  # past the vocabulary: below every real key
    best_race = tl.full([], -1.0, tl.float32)
    best = tl.full([], 0, tl.int64)
    for rank in range(top_k):
        top = tl.max(key, axis=0)  # the keys are distinct: one element holds it
        prob = (top >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        race = prob / tl.load(EXPO + row * se + rank)
        take = race > best_race  # strictly: the first rank wins a tie, as argmax does
        best = tl.where(take, BV - 1 - (top & 0xFFFFFFFF), best)
        best_race = tl.where(take, race, best_race)
        key = tl.where(key == top, -1, key)
    tl.store(OUT + row, best)


NUM_WARPS = 32


def topk_sample(logits: torch.Tensor, top_k: int, temperature: float,
                generator: torch.Generator | None, *, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """logits [R, V] -> tokens [R] int64 (one_kernel_serves(V, top_k)); draws [R, top_k]
    exponentials. `num_warps` is a tuning knob for tests/gpu/bench_topk_sampling.py."""
    R, V = logits.shape
    if not one_kernel_serves(V, top_k) or not 0 < top_k <= V:
        raise ValueError(f"topk_sample: vocabulary {V}, top-k {top_k}")
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    draws = torch.empty(R, top_k, dtype=torch.float32, device=logits.device).exponential_(1, generator=generator)
    out = torch.empty(R, dtype=torch.int64, device=logits.device)
    kernel = _topk_race_kernel if V <= MAX_VOCAB else _topk_extract_kernel
    kernel[(R,)](logits, draws, out, V, top_k, temperature, logits.stride(0), draws.stride(0),
                 BV=triton.next_power_of_2(V), num_warps=num_warps, **overlap.launch(logits.device))
    return out
