"""Split-K ("flash-decoding") ring attention in Triton, for few queries (T <= TRITON_MAX_T).

Keys are counted by age (0 = the newest entry, position pos + T - 1). The query at
pos + t sees exactly the ages [T-1-t, min(live, T-1-t + context)), where live is the
number of entries the ring holds: one contiguous run, no mask needed inside it.
Grid (H, S, T): program (h, s, t) takes the s-th of S equal chunks of that run, with an
online softmax in fp32; a second kernel merges the S partial results of each (head,
query) in a fixed order (with S = 1, as for the depformer's few keys, the one program
writes the output itself). `live` is computed from `pos` inside the kernel, so grid and
graph are the same every frame while the work follows the conversation; nothing past
the live entries is ever loaded. No atomics and a fixed reduction order: the same inputs
give the same bits. ring_attention_queries.py serves several queries from one program per
chunk of keys instead (a knob until timed).
"""
from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from . import overlap
from .ring_attention_queries import queries_kernel

# Tuning, from tests/gpu/bench_ring_attention.py's sweep on an H200 (Moshi temporal scale,
# 32 layers x 32 heads x 128 dims, bf16; assets/benchmarks/ring_attention_sweep.json): small
# programs, many of them, keep the most loads in flight. One-warp split programs beat the
# earlier two-warp ones at every shape (all layers at 750 live keys: moshi 0.37 against 0.42 ms
# with one-warp merges, a DiffuPlex wake's 9 queries 0.76 against 1.30 ms; Mimi 0.025 against
# 0.027 ms).
WAVES = 16  # split-K programs per multiprocessor, at the longest run of keys
NUM_WARPS = 1
QUERIES_WARPS = 4  # ring_attention_queries' programs: 128 registers at 16 keys a block (ptxas, sm_90)
MERGE_WARPS = 1
MERGE_WARPS_MANY = 4
MANY_SPLITS = 32
"""Warps of a merge program: one, or MERGE_WARPS_MANY from MANY_SPLITS partial results up.
At the backbone's 66 splits one warp holds the [128, 128] partials in 255 registers and
spills (ptxas for sm_90), four hold them in 80: moshi's attention, all layers at 750 keys,
went from 0.37 to 0.30 ms. At the wake's 8 splits one warp is the faster (0.76 against 0.95 ms)."""


@triton.jit
def _split_kernel(Q, KV, POS, PACC, PM, PL, OUT,
                  sq_h, sq_t, sq_d, skv_r, skv_c, skv_h, skv_d, so_h, so_t, so_d,
                  T, ring, context, sm_scale,
                  HAS_CONTEXT: tl.constexpr, SPLITS: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr):
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


@triton.jit
def _merge_kernel(PACC, PM, PL, OUT, T, so_h, so_t, so_d,
                  SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr,
                  PDL: tl.constexpr):
    overlap.enter(PDL)
    h = tl.program_id(0)
    t = tl.program_id(1)
    s = tl.arange(0, SPLITS_P2)
    d = tl.arange(0, BLOCK_D)
    part = (h * T + t) * SPLITS + s
    s_ok = s < SPLITS
    m = tl.load(PM + part, mask=s_ok, other=float("-inf"))
    w = tl.exp(m - tl.max(m, axis=0))  # 0 for a chunk that saw no key
    l_all = tl.sum(w * tl.load(PL + part, mask=s_ok, other=0.0), axis=0)
    acc = tl.load(PACC + part[:, None] * BLOCK_D + d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(w[:, None] * acc, axis=0) / l_all
    tl.store(OUT + h * so_h + t * so_t + d * so_d, out.to(OUT.dtype.element_ty), mask=d < D)


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
                          waves: int = WAVES, block_n: int | None = None,
                          num_warps: int | None = None, merge_warps: int | None = None,
                          per_query: bool = True) -> torch.Tensor:
    """See ring_attention.ring_attention; the keywords are tuning knobs for benchmarks.
    per_query=False: ring_attention_queries' kernel, each key read once for all T queries
    (not yet timed on a GPU: tests/gpu/bench_ring_attention.py sweeps it)."""
    ring, _, H, D = kv_ring.shape
    block_d = triton.next_power_of_2(D)
    if block_n is None:
        block_n = max(16, min(64, 1024 // block_d))  # few registers: many programs resident
    max_run = ring if context is None else min(ring, context)
    grouped = not per_query and T > 1
    if num_warps is None:
        num_warps = QUERIES_WARPS if grouped else NUM_WARPS
    splits = _splits(H, 1 if grouped else T, max_run, block_n, q.device, waves)
    pacc = torch.empty(H * T * splits * block_d, device=q.device, dtype=torch.float32)
    pm = torch.empty(H * T * splits, device=q.device, dtype=torch.float32)
    pl = torch.empty_like(pm)
    # [1, H, T, D] over [T, H, D] memory: the output projection reads each row contiguously.
    out = torch.empty(1, T, H, D, device=q.device, dtype=q.dtype).transpose(1, 2)
    args = (q, kv_ring, pos, pacc, pm, pl, out, q.stride(1), q.stride(2), q.stride(3),
            kv_ring.stride(0), kv_ring.stride(1), kv_ring.stride(2), kv_ring.stride(3),
            out.stride(1), out.stride(2), out.stride(3), T, ring, context or 0, 1.0 / math.sqrt(D))
    meta = dict(HAS_CONTEXT=context is not None, SPLITS=splits, BLOCK_N=block_n, BLOCK_D=block_d, D=D,
                num_warps=num_warps, **overlap.launch(q.device))
    if grouped:
        upcast = os.environ.get("TRITON_INTERPRET") == "1"
        queries_kernel[(H, splits)](*args, TP=max(16, triton.next_power_of_2(T)), UPCAST=upcast,
                                    PREC="ieee" if q.dtype == torch.float32 or upcast else "tf32", **meta)
    else:
        _split_kernel[(H, splits, T)](*args, **meta)
    if splits == 1:
        return out
    if merge_warps is None:
        merge_warps = MERGE_WARPS_MANY if splits >= MANY_SPLITS else MERGE_WARPS
    _merge_kernel[(H, T)](pacc, pm, pl, out, T, out.stride(1), out.stride(2), out.stride(3),
                          SPLITS=splits, SPLITS_P2=triton.next_power_of_2(splits),
                          BLOCK_D=block_d, D=D, num_warps=merge_warps, **overlap.launch(q.device))
    return out
