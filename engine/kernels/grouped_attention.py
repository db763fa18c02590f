"""Split-K ("flash-decoding") attention over a linear KV cache for grouped query heads (GQA), for a
decoder's step or short pass: MiniCPM-o's Qwen3 LLM and its Llama TTS. A KV head's rep query heads for
the pass's T positions are its R = rep * T rows (row j * T + t: head j at pos + t). Row r sees the
entries [pos + t - window + 1, pos + t] (from 0 without a window): the union over the rows is one run,
cut into SPLITS equal chunks of BLOCK_N-key blocks. Grid (KV heads, SPLITS, row blocks): a program holds
a block of rows, padded to ROWS >= 16, and takes each block of keys on the tensor cores (scores = Q @ K.T,
then acc += P @ V after the online softmax, fp32 sums, P rounded to the values' dtype), each row masked
to its own range. ring_attention_triton's merge kernel sums the partial results in a fixed order: the
same inputs give the same bits. `pos` is read on the device, so a captured graph serves every position
of its span; nothing past pos + T is loaded. (Under torch's SDPA with a mask, the passes slowed with the
context far more than their reads grew: docs/benchmarks.md.)
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from . import overlap
from .online_softmax import fold_block, store_rows
from .ring_attention_triton import MERGE_CHUNK, _merge_kernel, _multiprocessors

WAVES = 4  # programs per multiprocessor at a full span, as ring_attention_queries' (its sweep's choice)
BLOCK_N = 64  # keys a block
MAX_ROWS = 64  # rows a program holds: acc [64, 128] fp32 across its warps


@triton.jit
def _grouped_kernel(Q, K, V, POS, PACC, PM, PL, OUT,
                    sq_h, sq_r, sq_d, sk_h, sk_n, sk_d, sv_h, sv_n, sv_d, so_h, so_r, so_d,
                    T, R, window, sm_scale,
                    HAS_WINDOW: tl.constexpr, SPLITS: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
                    PDL: tl.constexpr):
    overlap.enter(PDL)
    h = tl.program_id(0)
    s = tl.program_id(1)
    r = tl.program_id(2) * ROWS + tl.arange(0, ROWS)
    r_ok = r < R
    pos = tl.load(POS).to(tl.int32)
    last = pos + r % T  # each row's own position: the last key it sees
    run_lo = 0
    if HAS_WINDOW:
        run_lo = tl.maximum(pos - window + 1, 0)
    run_hi = pos + T
    chunk = tl.cdiv(tl.cdiv(run_hi - run_lo, SPLITS), BLOCK_N) * BLOCK_N
    lo = run_lo + s * chunk
    hi = tl.minimum(lo + chunk, run_hi)

    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(Q + h * sq_h + r[:, None] * sq_r + d[None, :] * sq_d, mask=r_ok[:, None] & d_ok[None, :], other=0.0)
    m = tl.full([ROWS], float("-inf"), tl.float32)
    l = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        key = start + tl.arange(0, BLOCK_N)
        key_ok = key < hi
        kv_ok = key_ok[:, None] & d_ok[None, :]
        entry = key.to(tl.int64)[:, None]  # a cache of all layers: an entry's offset passes 2**31 from 29K on
        k = tl.load(K + h * sk_h + entry * sk_n + d[None, :] * sk_d, mask=kv_ok, other=0.0)
        v = tl.load(V + h * sv_h + entry * sv_n + d[None, :] * sv_d, mask=kv_ok, other=0.0)
        seen = (key[None, :] <= last[:, None]) & key_ok[None, :] & r_ok[:, None]
        if HAS_WINDOW:
            seen = seen & (key[None, :] > last[:, None] - window)
        m, l, acc = fold_block(q, k, v, seen, m, l, acc, sm_scale, PREC, UPCAST)
    store_rows(m, l, acc, r, r_ok, d, d_ok, OUT, so_h, so_r, so_d, PACC, PM, PL, h, R, s, SPLITS, BLOCK_D)


def splits(kv_heads: int, row_blocks: int, span: int, device: torch.device, waves: int = WAVES) -> int:
    """Chunks of keys per (KV head, row block): about `waves` programs a multiprocessor at the longest
    run, `span`. Static sizes only, so eager and replayed passes sum in the same order."""
    most = triton.cdiv(waves * _multiprocessors(device.index or 0), kv_heads * row_blocks)
    return max(1, min(triton.cdiv(span, BLOCK_N), most))


def triton_grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, pos: torch.Tensor, T: int,
                             span: int, window: int | None) -> torch.Tensor:
    """See engine.ops.attention.grouped_attention."""
    kv_heads, rows, d = q.shape
    block_d = triton.next_power_of_2(d)
    rows_p2 = max(16, triton.next_power_of_2(rows))
    block_rows = min(rows_p2, MAX_ROWS)
    row_blocks = triton.cdiv(rows, block_rows)
    count = splits(kv_heads, row_blocks, span, q.device)
    pacc = torch.empty(kv_heads * rows * count * block_d, device=q.device, dtype=torch.float32)
    pm = torch.empty(kv_heads * rows * count, device=q.device, dtype=torch.float32)
    pl = torch.empty_like(pm)
    out = torch.empty(kv_heads, rows, d, device=q.device, dtype=q.dtype)
    upcast = os.environ.get("TRITON_INTERPRET") == "1"
    launch = overlap.launch(q.device)
    _grouped_kernel[(kv_heads, count, row_blocks)](
        q, keys, values, pos, pacc, pm, pl, out, *q.stride(), *keys.stride(), *values.stride(), *out.stride(),
        T, rows, window or 0, 1.0 / math.sqrt(d), HAS_WINDOW=window is not None, SPLITS=count, ROWS=block_rows,
        BLOCK_N=BLOCK_N, BLOCK_D=block_d, D=d, PREC="ieee" if q.dtype == torch.float32 or upcast else "tf32",
        UPCAST=upcast, num_warps=4 if block_rows <= 32 else 8, **launch)
    if count > 1:
        _merge_kernel[(kv_heads, rows)](pacc, pm, pl, out, rows, *out.stride(), SPLITS=count,
                                        SPLITS_P2=triton.next_power_of_2(count), BLOCK_D=block_d, D=d,
                                        MERGE_CHUNK=MERGE_CHUNK, num_warps=1, **launch)
    return out
