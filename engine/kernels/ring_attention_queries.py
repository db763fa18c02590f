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


@triton.jit
def _op(v, UPCAST: tl.constexpr):
    """v as a tl.dot operand: as it is, or fp32 under Triton's interpreter (whose dot multiplies
    a bf16 tensor's raw bit patterns; a product of two bf16 numbers is exact in fp32)."""
    if UPCAST:
        return v.to(tl.float32)
    return v


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
        scores = tl.dot(_op(q, UPCAST), tl.trans(_op(k, UPCAST)), input_precision=PREC) * sm_scale
        seen = (age[None, :] >= first[:, None]) & (age[None, :] < stop[:, None]) & key_ok[None, :] & t_ok[:, None]
        scores = tl.where(seen, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a query with no key yet: nothing to scale
        alpha = tl.exp(m - m_ref)
        p = tl.exp(scores - m_ref[:, None])  # 0 where the query does not see the key
        l = l * alpha + tl.sum(p, axis=1)
        pv = tl.dot(_op(p.to(v.dtype), UPCAST), _op(v, UPCAST), input_precision=PREC)
        acc = acc * alpha[:, None] + pv
        m = m_new

    if SPLITS == 1:  # every query's window in this one program: each saw its own key at least
        out = OUT + h * so_h + t[:, None] * so_t + d[None, :] * so_d
        l = tl.where(t_ok, l, 1.0)  # the padding rows saw nothing
        tl.store(out, (acc / l[:, None]).to(OUT.dtype.element_ty), mask=t_ok[:, None] & d_ok[None, :])
        return
    part = (h * T + t) * SPLITS + s
    tl.store(PM + part, m, mask=t_ok)  # -inf, l = 0, acc = 0 for a query with no key here
    tl.store(PL + part, l, mask=t_ok)
    tl.store(PACC + part[:, None] * BLOCK_D + d[None, :], acc, mask=t_ok[:, None])
