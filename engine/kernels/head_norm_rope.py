"""A grouped-query layer's work between its QKV product and attention, in one kernel: each query and
key head RMS-normalised with its norm weight (Qwen3's q_norm/k_norm; a Llama has none), rotated by RoPE in the
half-split layout (rotate_half) from cos/sin tables, queries written grouped by their KV head (a KV
head's query heads as its rows, as attention reads them) and keys and values into the cache at the
pass's positions. In torch this is about 40 small kernels a layer. Each step rounds to the
activation dtype where the torch formulas do (statistics in fp32, the normalised row rounded, then
times the weight, each RoPE product and their sum rounded), so the result is the torch ops' up to
the order of the 128 squares' fp32 sum.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap


@triton.jit
def _rounded(x, BF16: tl.constexpr, dt: tl.constexpr):
    """fp32 x rounded to the activation dtype, back in fp32. For bf16 by its bits (to nearest, ties to even):
    the compiler may drop a cast to bf16 and back as a no-op, and the roundings are the point here."""
    if BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return x.to(dt).to(tl.float32)


@triton.jit
def _head_kernel(QKV, sqkv, QN, KN, COS, SIN, st, POS, QOUT, KEYS, VALUES, sc_h, sc_p, M, eps,
                 HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, NORM: tl.constexpr,
                 BF16: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    m = tl.program_id(0)
    head = tl.program_id(1)  # query heads, then key heads, then value heads
    d = tl.arange(0, D)
    partner = (d + D // 2) % D
    row = QKV + m * sqkv + head * D
    dt = QKV.dtype.element_ty
    pos = tl.load(POS) + m
    if head >= HEADS + KV_HEADS:  # a value head: to the cache as it is
        tl.store(VALUES + (head - HEADS - KV_HEADS) * sc_h + pos * sc_p + d, tl.load(row + d))
    else:
        is_query = head < HEADS
        n = tl.load(row + d).to(tl.float32)
        np_ = tl.load(row + partner).to(tl.float32)
        if NORM:
            norm = QN if is_query else KN
            rstd = tl.math.rsqrt(tl.sum(n * n, axis=0) / D + eps)
            n = _rounded(tl.load(norm + d).to(tl.float32) * _rounded(n * rstd, BF16, dt), BF16, dt)
            np_ = _rounded(tl.load(norm + partner).to(tl.float32) * _rounded(np_ * rstd, BF16, dt), BF16, dt)
        rotated = tl.where(d < D // 2, -np_, np_)
        cos = _rounded(tl.load(COS + pos * st + d).to(tl.float32), BF16, dt)  # fp32 tables: as .to(dtype)
        sin = _rounded(tl.load(SIN + pos * st + d).to(tl.float32), BF16, dt)
        y = (_rounded(n * cos, BF16, dt) + _rounded(rotated * sin, BF16, dt)).to(dt)
        if is_query:  # query head h of KV head h // rep is row (h % rep) * M + m of that KV head's group
            tl.store(QOUT + (head * M + m) * D + d, y)
        else:
            tl.store(KEYS + (head - HEADS) * sc_h + pos * sc_p + d, y)


def heads_into_cache(qkv: torch.Tensor, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
                     cos: torch.Tensor, sin: torch.Tensor, position: torch.Tensor, keys: torch.Tensor,
                     values: torch.Tensor, heads: int) -> torch.Tensor:
    """qkv [M, (heads + 2 KV) * D] (rows of unit stride) -> queries [KV, rep * M, D]; keys and values
    [KV, capacity, D] (a layer's cache, D of unit stride) written at rows position[0] + m. cos and sin
    [capacity, D] are the rotary tables by position (fp32 ones rounded to qkv's dtype first). Without
    norms (None: a Llama's heads) q and k are rotated as they are."""
    kv_heads, _, d = keys.shape
    m = qkv.shape[0]
    if qkv.shape[1] != (heads + 2 * kv_heads) * d or qkv.stride(1) != 1 or keys.stride(2) != 1 \
            or keys.stride() != values.stride() or cos.stride(1) != 1 or cos.stride() != sin.stride():
        raise ValueError(f"heads into cache: qkv {tuple(qkv.shape)} against a cache of {kv_heads} heads of {d}")
    out = torch.empty(kv_heads, heads // kv_heads * m, d, dtype=qkv.dtype, device=qkv.device)
    _head_kernel[(m, heads + 2 * kv_heads)](
        qkv, qkv.stride(0), qkv if q_norm is None else q_norm, qkv if k_norm is None else k_norm,
        cos, sin, cos.stride(0), position, out, keys, values,
        keys.stride(0), keys.stride(1), m, eps, HEADS=heads, KV_HEADS=kv_heads, D=d, NORM=q_norm is not None,
        BF16=qkv.dtype == torch.bfloat16, num_warps=1,
        **overlap.launch(qkv.device))
    return out
