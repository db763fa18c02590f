"""Ring attention for several queries (a DiffuPlex wake's 2K + 1) that reads each key once.

ring_attention_triton's split kernel runs a program per (head, chunk of keys, query): each query's
programs load their keys themselves, so a wake's 9 queries read the ring 9 times. Here a program per
(head, chunk of keys) holds all T queries, padded to TP >= 16 rows, and takes each block of keys on
the tensor cores: scores = Q @ K.T and, after the online softmax, acc += P @ V, both with fp32 sums
(P rounded to the values' dtype for the product, as flash attention rounds it; fp32 inputs use exact
fp32 products). Each query keeps its own window: query t sees ages [T - 1 - t, stop_t), masked
inside the block, so the chunks cover the union of the windows. The partial results are laid out as
the split kernel's, for the same merge kernel. Which kernel serves a shape is
ring_attention_triton's choice, from the shape only.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import overlap
from .online_softmax import fold_block, store_rows


@triton.jit
def queries_kernel(Q, KV, POS, PACC, PM, PL, OUT,
                   sq_h, sq_t, sq_d, skv_r, skv_c, skv_h, skv_d, so_h, so_t, so_d,
                   T, ring, context, sm_scale,
                   HAS_CONTEXT: tl.constexpr, SPLITS: tl.constexpr, TP: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
                   PDL: tl.constexpr):
    overlap.enter(PDL)
    h = tl.program_id(0)
    s = tl.program_id(1)
    end = tl.load(POS) + T  # entries written so far
    t = tl.arange(0, TP)
    t_ok = t < T
    first = T - 1 - t  # age of each query's own key
    stop = tl.zeros([TP], tl.int32) + tl.minimum(end, ring).to(tl.int32)
    if HAS_CONTEXT:
        stop = tl.minimum(stop, first + context)
    run = tl.max(tl.where(t_ok, stop, 0), axis=0)  # every query's window lies in ages [0, run)
    chunk = tl.cdiv(tl.cdiv(run, SPLITS), BLOCK_N) * BLOCK_N
    lo = s * chunk
    hi = tl.minimum(lo + chunk, run)

    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(Q + h * sq_h + t[:, None] * sq_t + d[None, :] * sq_d, mask=t_ok[:, None] & d_ok[None, :], other=0.0)
    m = tl.full([TP], float("-inf"), tl.float32)
    l = tl.zeros([TP], tl.float32)
    acc = tl.zeros([TP, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        age = start + tl.arange(0, BLOCK_N)
        key_ok = age < hi
        slot = tl.where(key_ok, (end - 1 - age) % ring, 0)
        kv_off = slot[:, None] * skv_r + h * skv_h + d[None, :] * skv_d
        kv_ok = key_ok[:, None] & d_ok[None, :]
        k = tl.load(KV + kv_off, mask=kv_ok, other=0.0)
        v = tl.load(KV + skv_c + kv_off, mask=kv_ok, other=0.0)
        seen = (age[None, :] >= first[:, None]) & (age[None, :] < stop[:, None]) & key_ok[None, :] & t_ok[:, None]
        m, l, acc = fold_block(q, k, v, seen, m, l, acc, sm_scale, PREC, UPCAST)
    store_rows(m, l, acc, t, t_ok, d, d_ok, OUT, so_h, so_t, so_d, PACC, PM, PL, h, T, s, SPLITS, BLOCK_D)
