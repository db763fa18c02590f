"""Split-K ("flash-decoding") ring attention in Triton, for few queries (T <= TRITON_MAX_T).

Keys are counted by age (0 = the newest entry, position pos + T - 1). The query at pos + t sees
exactly the ages [T-1-t, min(live, T-1-t + context)), live being the number of entries the ring
holds: one contiguous run, no mask needed inside it. Grid (H, S, T): program (h, s, t) takes the
s-th of S equal chunks of that run, with an online softmax in fp32; the last of a (head, query)'s S
programs to finish merges their partial results in a fixed order (split_sums.arrived_last: no second
launch; with S = 1, as for the depformer's few keys, the one program writes the output itself).
`live` is computed from `pos` inside the kernel, so grid and graph are the same every frame while
the work follows the conversation; nothing past the live entries is ever loaded. No atomics on the
data and a fixed reduction order: the same inputs give the same bits. From QUERIES_FROM queries,
ring_attention_queries.py serves them instead: a program per chunk of keys, then a merge launch.
"""
from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from . import overlap, split_sums
from .ring_attention_queries import queries_kernel

# Tuning, from tests/gpu/bench_ring_attention.py's sweep on an H200 (Moshi temporal scale,
# 32 layers x 32 heads x 128 dims, bf16; assets/benchmarks/ring_attention_sweep.json): small
# programs, many of them, keep the most loads in flight. One-warp split programs beat the
# two- and four-warp ones at every shape of one or two queries (all layers at 750 live keys:
# moshi 0.33 ms, Mimi's 8 layers at 62 keys 0.028 ms), and merging in the last split program
# to finish costs the same as a one-warp merge launch (0.329 against 0.336 ms at 750 keys,
# 0.738 against 0.736 at 3000) with one launch a layer fewer.
WAVES = 16  # split-K programs per multiprocessor, at the longest run of keys
NUM_WARPS = 1
MERGE_WARPS = 1  # a merge launch's (ring_attention_queries' partial results)
FUSED_MERGE = True
"""Whether the split programs merge their partial results themselves (the last of a query's to
finish: split_sums.arrived_last) instead of a merge launch after them."""
MERGE_CHUNK = 8
"""Partial results a merge sums at a time (fp32 [MERGE_CHUNK, 128] in one warp's registers)."""
QUERIES_FROM = 3
"""Queries from which one program serves them all per chunk of keys (ring_attention_queries: a
DiffuPlex wake's 2K + 1 rows). At a wake's 9 queries, all layers: 0.26 against 0.47 ms at 375
live keys, 0.78 against 2.77 at 3000; Mimi's steps of two stay one program a query (0.028
against 0.031 ms)."""
QUERIES_WARPS = 4  # ring_attention_queries' programs: 128 registers at 16 keys a block (ptxas, sm_90)
QUERIES_WAVES = 4  # its programs per multiprocessor: 17 chunks of keys a head on an H200


@triton.jit
def _split_kernel(Q, KV, POS, PACC, PM, PL, OUT,
                  sq_h, sq_t, sq_d, skv_r, skv_c, skv_h, skv_d, so_h, so_t, so_d,
                  T, ring, context, sm_scale, COUNT,
                  HAS_CONTEXT: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr, FUSED_MERGE: tl.constexpr,
                  MERGE_CHUNK: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    h = tl.program_id(0)
    s = tl.program_id(1)
    t = tl.program_id(2)
    end = tl.load(POS) + T  # entries written so far
    first = T - 1 - t  # age of the query's own key
    stop = tl.minimum(end, ring).to(tl.int32)
    if HAS_CONTEXT:
        stop = tl.minimum(stop, first + context)
    chunk = tl.cdiv(tl.cdiv(stop - first, SPLITS), BLOCK_N) * BLOCK_N
    lo = first + s * chunk
    hi = tl.minimum(lo + chunk, stop)

    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(Q + h * sq_h + t * sq_t + d * sq_d, mask=d_ok, other=0.0).to(tl.float32) * sm_scale
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        age = start + tl.arange(0, BLOCK_N)
        live = age < hi
        slot = tl.where(live, (end - 1 - age) % ring, 0)
        kv_off = slot[:, None] * skv_r + h * skv_h + d[None, :] * skv_d
        kv_ok = live[:, None] & d_ok[None, :]
        k = tl.load(KV + kv_off, mask=kv_ok, other=0.0).to(tl.float32)
        v = tl.load(KV + skv_c + kv_off, mask=kv_ok, other=0.0).to(tl.float32)
        scores = tl.where(live, tl.sum(k * q[None, :], axis=1), float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        alpha = tl.exp(m - m_new)  # the first block always holds a live key: m_new is finite
        p = tl.exp(scores - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new

    if SPLITS == 1:  # the whole run in one program: no partial results to merge
        tl.store(OUT + h * so_h + t * so_t + d * so_d, (acc / l).to(OUT.dtype.element_ty), mask=d_ok)
        return
    part = (h * T + t) * SPLITS + s
    tl.store(PM + part, m)  # -inf, l = 0, acc = 0 for a chunk with no key
    tl.store(PL + part, l)
    tl.store(PACC + part * BLOCK_D + d, acc)
    if FUSED_MERGE:  # noqa: SIM102 (compile-time around run-time); the last of the programs merges
        if split_sums.arrived_last(COUNT + h * T + t, SPLITS):
            _merged(PACC, PM, PL, OUT, h, t, T, so_h, so_t, so_d, SPLITS, SPLITS_P2, BLOCK_D, D, MERGE_CHUNK)


@triton.jit
def _merged(PACC, PM, PL, OUT, h, t, T, so_h, so_t, so_d, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
            BLOCK_D: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr):
    """Query t of head h from its SPLITS partial results: their softmax weights, then the
    weighted sum CHUNK partials at a time, chunks in order (a merge program of one warp holds
    a chunk in registers, not all 66 partials of the backbone's split)."""
    first = (h * T + t) * SPLITS
    s = tl.arange(0, SPLITS_P2)
    s_ok = s < SPLITS
    m = tl.load(PM + first + s, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
    m_all = tl.max(m, axis=0)
    l_all = tl.sum(tl.exp(m - m_all) * tl.load(PL + first + s, mask=s_ok, other=0.0, cache_modifier=".cg"), axis=0)
    d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for c in tl.static_range(0, SPLITS, CHUNK):
        sc = c + tl.arange(0, CHUNK)
        ok = sc < SPLITS
        w = tl.exp(tl.load(PM + first + sc, mask=ok, other=float("-inf"), cache_modifier=".cg") - m_all)
        part = tl.load(PACC + (first + sc)[:, None] * BLOCK_D + d[None, :], mask=ok[:, None], other=0.0,
                       cache_modifier=".cg")
        acc += tl.sum(w[:, None] * part, axis=0)  # w = 0 for a chunk that saw no key
    tl.store(OUT + h * so_h + t * so_t + d * so_d, (acc / l_all).to(OUT.dtype.element_ty), mask=d < D)


@triton.jit
def _merge_kernel(PACC, PM, PL, OUT, T, so_h, so_t, so_d,
                  SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr,
                  MERGE_CHUNK: tl.constexpr, PDL: tl.constexpr):
    """Grid (H, T): the merge as a launch of its own (ring_attention_queries' partial results,
    or the split kernel's without FUSED_MERGE)."""
    overlap.enter(PDL)
    _merged(PACC, PM, PL, OUT, tl.program_id(0), tl.program_id(1), T, so_h, so_t, so_d, SPLITS, SPLITS_P2,
            BLOCK_D, D, MERGE_CHUNK)


@functools.cache
def _multiprocessors(device_index: int) -> int:
    if not torch.cuda.is_available():  # the Triton interpreter, in CPU tests
        return 8
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _splits(H: int, T: int, max_run: int, block_n: int, device: torch.device, waves: int) -> int:
    """About `waves` programs per multiprocessor at the longest run of keys. A function of
    static sizes only, so eager and replayed calls reduce in the same order."""
    sms = _multiprocessors(device.index or 0)
    return max(1, min(triton.cdiv(max_run, block_n), triton.cdiv(waves * sms, H * T)))


def triton_ring_attention(q, kv_ring, pos, T: int, context: int | None, *,
                          waves: int | None = None, block_n: int | None = None,
                          num_warps: int | None = None, merge_warps: int = MERGE_WARPS,
                          per_query: bool | None = None, fused_merge: bool = FUSED_MERGE,
                          merge_chunk: int = MERGE_CHUNK) -> torch.Tensor:
    """See ring_attention.ring_attention; the keywords are tuning knobs for benchmarks.
    per_query: one program per query (the split kernel) or ring_attention_queries' kernel, each
    key read once for all T queries; by default the latter from QUERIES_FROM queries."""
    ring, _, H, D = kv_ring.shape
    block_d = triton.next_power_of_2(D)
    if block_n is None:
        block_n = max(16, min(64, 1024 // block_d))  # few registers: many programs resident
    max_run = ring if context is None else min(ring, context)
    # tl.dot multiplies at least 16 deep: heads of fewer dimensions (small test models) keep
    # one program a query.
    grouped = (T >= QUERIES_FROM if per_query is None else not per_query and T > 1) and block_d >= 16
    if num_warps is None:
        num_warps = QUERIES_WARPS if grouped else NUM_WARPS
    if waves is None:
        waves = QUERIES_WAVES if grouped else WAVES
    splits = _splits(H, 1 if grouped else T, max_run, block_n, q.device, waves)
    pacc = torch.empty(H * T * splits * block_d, device=q.device, dtype=torch.float32)
    pm = torch.empty(H * T * splits, device=q.device, dtype=torch.float32)
    pl = torch.empty_like(pm)
    # [1, H, T, D] over [T, H, D] memory: the output projection reads each row contiguously.
    out = torch.empty(1, T, H, D, device=q.device, dtype=q.dtype).transpose(1, 2)
    args = (q, kv_ring, pos, pacc, pm, pl, out, q.stride(1), q.stride(2), q.stride(3),
            kv_ring.stride(0), kv_ring.stride(1), kv_ring.stride(2), kv_ring.stride(3),
            out.stride(1), out.stride(2), out.stride(3), T, ring, context or 0, 1.0 / math.sqrt(D))
    launch = overlap.launch(q.device)
    shape = dict(SPLITS=splits, BLOCK_D=block_d, D=D)
    meta = dict(HAS_CONTEXT=context is not None, BLOCK_N=block_n, num_warps=num_warps, **shape, **launch)
    fused = fused_merge and not grouped and splits > 1
    merge = dict(SPLITS_P2=triton.next_power_of_2(splits), MERGE_CHUNK=merge_chunk)
    if grouped:
        upcast = os.environ.get("TRITON_INTERPRET") == "1"
        queries_kernel[(H, splits)](*args, TP=max(16, triton.next_power_of_2(T)), UPCAST=upcast,
                                    PREC="ieee" if q.dtype == torch.float32 or upcast else "tf32", **meta)
    else:
        count = split_sums.counters(q.device, H * T) if fused else pm
        _split_kernel[(H, splits, T)](*args, count, FUSED_MERGE=fused, **merge, **meta)
    if splits == 1 or fused:
        return out
    _merge_kernel[(H, T)](pacc, pm, pl, out, T, out.stride(1), out.stride(2), out.stride(3),
                          num_warps=merge_warps, **merge, **shape, **launch)
    return out
