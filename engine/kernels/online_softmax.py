"""The online softmax that the many-row attention kernels (ring_attention_queries, grouped_attention) share:
one block of keys folded into a block of rows' running max, sum and values, on the tensor cores, and the
rows' result stored at the end, whole or as a split's partial for ring_attention_triton's merge kernel."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _op(v, UPCAST: tl.constexpr):
    """v as a tl.dot operand: as it is, or fp32 under Triton's interpreter (whose dot multiplies
    a bf16 tensor's raw bit patterns; a product of two bf16 numbers is exact in fp32)."""
    if UPCAST:
        return v.to(tl.float32)
    return v


@triton.jit
def fold_block(q, k, v, seen, m, l, acc, sm_scale, PREC: tl.constexpr, UPCAST: tl.constexpr):
    """Rows q [ROWS, D] against one block of keys k and values v [BLOCK_N, D]; `seen` [ROWS, BLOCK_N] says
    which key each row sees. Scores = Q @ K.T and acc += P @ V with fp32 sums, P rounded to the values'
    dtype for the product as flash attention rounds it. Returns the new (m, l, acc)."""
    scores = tl.dot(_op(q, UPCAST), tl.trans(_op(k, UPCAST)), input_precision=PREC) * sm_scale
    scores = tl.where(seen, scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, axis=1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: nothing to scale
    alpha = tl.exp(m - m_ref)
    p = tl.exp(scores - m_ref[:, None])  # 0 where the row does not see the key
    l = l * alpha + tl.sum(p, axis=1)
    pv = tl.dot(_op(p.to(v.dtype), UPCAST), _op(v, UPCAST), input_precision=PREC)
    return m_new, l, acc * alpha[:, None] + pv


@triton.jit
def store_rows(m, l, acc, row, row_ok, d, d_ok, OUT, so_h, so_r, so_d, PACC, PM, PL, h, R, s,
               SPLITS: tl.constexpr, BLOCK_D: tl.constexpr):
    """The rows' result: with one split, acc / l into OUT[h, row] (each row saw its own key at least);
    else this split's m, l and acc as partial `(h * R + row) * SPLITS + s` of the merge kernel's layout
    (-inf, 0 and 0 for a row that saw no key here)."""
    if SPLITS == 1:
        l = tl.where(row_ok, l, 1.0)  # the padding rows saw nothing
        out = OUT + h * so_h + row[:, None] * so_r + d[None, :] * so_d
        tl.store(out, (acc / l[:, None]).to(OUT.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        part = (h * R + row) * SPLITS + s
        tl.store(PM + part, m, mask=row_ok)
        tl.store(PL + part, l, mask=row_ok)
        tl.store(PACC + part[:, None] * BLOCK_D + d[None, :], acc, mask=row_ok[:, None])
