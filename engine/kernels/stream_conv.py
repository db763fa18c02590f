"""A streaming causal convolution of one chunk (batch 1, fp32) in one kernel, and the update of its
kept input tail in a second. Built for SEANet's residual blocks (ELU, a convolution over the kept
tail and this chunk, ELU, a 1x1 convolution, the skip's addition), many small kernels in torch: the
convolution reads the tail and the new input in place (no concatenation), applies the ELU to the
new input as it loads it (the tail is kept activated) and adds the bias and the residual in its
epilogue: out[o, t] = bias[o] + sum over (i, j) of w[o, i, j] * in[i, t * stride + j * dilation],
`in` the tail then the chunk. A product of [C_out, C_in * kernel] weights and the input gathered on
the fly, on `tl.dot` in TF32 (fp32 accumulation): how cuDNN runs torch's fp32 convolutions by
default, so the stock Mimi's arithmetic. The second kernel updates the tail after: the first's
programs still read the old one. A deep product with few output tiles would leave most SMs idle:
its depth is split over programs storing fp32 partials, added in split order by the tile's last
(split_sums: same bits every time) before bias and residual; the split depends on shape alone.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap, split_sums


@triton.jit
def _elu(v, alpha):
    return tl.where(v > 0, v, alpha * (tl.exp(v) - 1.0))


@triton.jit
def _conv_kernel(X, TAIL, W, BIAS, RES, OUT, WORK, COUNT, c_out, t_in, t_out, tail_len, stride, dilation, alpha,
                 sx_c, st_c, sw_o, sr_c, so_c, sw_s,
                 KK: tl.constexpr, KSIZE: tl.constexpr, ELU: tl.constexpr, HAS_BIAS: tl.constexpr,
                 HAS_RES: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 SPLIT: tl.constexpr, KSPAN: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr):
    """Grid (output-channel tiles, time tiles, splits). KK = C_in * KSIZE, the product's depth,
    split in spans of KSPAN; with SPLIT > 1 each program stores its partial sum [c_out, t_out]
    in WORK and the tile's last to finish adds them up and finishes (split_sums)."""
    overlap.enter(PDL)
    o = tl.program_id(0) * BM + tl.arange(0, BM)
    t = tl.program_id(1) * BN + tl.arange(0, BN)
    o_ok = o < c_out
    t_ok = t < t_out
    out_ok = o_ok[:, None] & t_ok[None, :]
    work = WORK + o[:, None] * t_out + t[None, :]
    acc = _product(X, TAIL, W, o, t, o_ok, t_ok, t_in, tail_len, stride, dilation, alpha, sx_c, st_c, sw_o,
                   tl.program_id(2) * KSPAN, KK, KSIZE, ELU, BM, BN, BK, KSPAN, PREC)
    if SPLIT > 1:  # the last of the tile's programs to finish adds the partial sums up
        tl.store(work + tl.program_id(2) * sw_s, acc, mask=out_ok)
        if not split_sums.arrived_last(COUNT + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), SPLIT):
            return
        acc = split_sums.added(work, sw_s, out_ok, BM, BN, SPLIT)
    if HAS_BIAS:
        acc += tl.load(BIAS + o, mask=o_ok, other=0.0)[:, None]
    if HAS_RES:
        acc = tl.load(RES + o[:, None] * sr_c + t[None, :], mask=out_ok, other=0.0) + acc
    tl.store(OUT + o[:, None] * so_c + t[None, :], acc, mask=out_ok)


@triton.jit
def _product(X, TAIL, W, o, t, o_ok, t_ok, t_in, tail_len, stride, dilation, alpha, sx_c, st_c, sw_o, k_first,
             KK: tl.constexpr, KSIZE: tl.constexpr, ELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr, KSPAN: tl.constexpr, PREC: tl.constexpr):
    """The [BM, BN] fp32 sum over the depth span [k_first, k_first + KSPAN) of KK."""
    acc = tl.zeros([BM, BN], tl.float32)
    for k0 in range(k_first, k_first + KSPAN, BK):
        kk = k0 + tl.arange(0, BK)
        k_ok = kk < KK
        i = kk // KSIZE
        p = t[None, :] * stride + (kk % KSIZE)[:, None] * dilation  # [BK, BN]: position in tail + chunk
        ok = k_ok[:, None] & t_ok[None, :]
        old = tl.load(TAIL + i[:, None] * st_c + p, mask=ok & (p < tail_len), other=0.0)
        new = tl.load(X + i[:, None] * sx_c + (p - tail_len), mask=ok & (p >= tail_len), other=0.0)
        if ELU:
            new = _elu(new, alpha)
        w = tl.load(W + o[:, None] * sw_o + kk[None, :], mask=o_ok[:, None] & k_ok[None, :], other=0.0)
        acc = tl.dot(w, tl.where(p < tail_len, old, new), acc, input_precision=PREC)
    return acc


@triton.jit
def _tail_kernel(X, TAIL, t_in, tail_len, alpha, sx_c, st_c, ELU: tl.constexpr, BT: tl.constexpr,
                 PDL: tl.constexpr):
    """Channel program_id(0)'s new tail: the last tail_len samples of its tail + chunk."""
    overlap.enter(PDL)
    c = tl.program_id(0)
    n = tl.arange(0, BT)
    q = t_in + n  # position in tail + chunk
    ok = n < tail_len
    old = tl.load(TAIL + c * st_c + q, mask=ok & (q < tail_len), other=0.0)
    new = tl.load(X + c * sx_c + (q - tail_len), mask=ok & (q >= tail_len), other=0.0)
    if ELU:
        new = _elu(new, alpha)
    v = tl.where(q < tail_len, old, new)
    tl.debug_barrier()  # every read of the old tail before any write (a short chunk shifts it)
    tl.store(TAIL + c * st_c + n, v, mask=ok)


BK = 32
DEEP, DEEP_BK = 1024, 128
"""A product at least DEEP deep is walked in chunks of DEEP_BK, others in chunks of BK. The deep
layers (the last stages' downsamplings and convolutions: up to 33 MB of weights for two output
columns) are a stream of weights, and 32-wide chunks kept too few bytes in flight: in a replayed
Mimi frame on an H200 (bench.mimi_tiles) the encoder's largest took 221 µs so, 36 µs in
128-wide chunks split over two programs a multiprocessor."""
PRECISION = "tf32"
"""The product's arithmetic: TF32 products with fp32 sums, as cuDNN's default, or "ieee"
(plain fp32; the tests check the index arithmetic to fp32 rounding there)."""
MAX_SPLIT = 16
"""At most this many programs share one output tile's depth (1: never split)."""
_BUSY = 264  # programs that keep an H100/H200's 132 multiprocessors busy: two each
_MIN_SPAN = 4 * BK  # a program's share of the depth: at least this, in whole chunks


def chunk(depth: int) -> int:
    """The depth a program multiplies per step."""
    return DEEP_BK if depth >= DEEP else BK


def tiles(c_out: int, t_out: int, depth: int) -> tuple[int, int, int, int, int]:
    """(BM, BN, split, KSPAN, BK) for a layer: a function of its shape only, so a convolution
    sums in the same order eagerly and graph-replayed. Long outputs take narrower time tiles
    until they fill the multiprocessors; short deep ones split their depth (each program at
    least _MIN_SPAN of it, in whole chunks)."""
    bm = 16 if c_out <= 16 else 32
    bn = max(16, min(64, triton.next_power_of_2(t_out)))
    while bn > 16 and triton.cdiv(c_out, bm) * triton.cdiv(t_out, bn) < _BUSY:
        bn //= 2
    programs = triton.cdiv(c_out, bm) * triton.cdiv(t_out, bn)
    bk = chunk(depth)
    split = max(1, min(MAX_SPLIT, _BUSY // programs, depth // _MIN_SPAN))
    span = triton.cdiv(triton.cdiv(depth, split), bk) * bk
    return bm, bn, triton.cdiv(depth, span), span, bk


def stream_conv(x: torch.Tensor, tail: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None,
                stride: int, dilation: int, elu: float | None, residual: torch.Tensor | None) -> torch.Tensor:
    """x [1, C_in, T] (the chunk, before the ELU when `elu` is its alpha), tail [1, C_in, L] (the
    convolution's input kept from before; None when L = 0), weight [C_out, C_in, K] ->
    [1, C_out, T_out] (+ residual [1, C_out, T_out]); the tail then holds the last L samples of
    tail + chunk."""
    c_out, c_in, ksize = weight.shape
    t_in = x.shape[-1]
    tail_len = 0 if tail is None else tail.shape[-1]
    t_out = (tail_len + t_in - (ksize - 1) * dilation - 1) // stride + 1
    if x.shape[:2] != (1, c_in) or x.dtype != weight.dtype or (
            tail is not None and (tail.shape[:2] != (1, c_in) or tail.stride(-1) != 1)):
        raise ValueError(f"stream conv: chunk {tuple(x.shape)} and tail {None if tail is None else tuple(tail.shape)}"
                         f" against weight {tuple(weight.shape)}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    weight = weight.reshape(c_out, c_in * ksize)  # contiguous as a parameter is
    out = torch.empty(1, c_out, t_out, dtype=x.dtype, device=x.device)
    if residual is not None and residual.shape != out.shape:
        raise ValueError(f"stream conv: residual {tuple(residual.shape)} against output {tuple(out.shape)}")
    dummy = x
    res = dummy if residual is None else residual if residual.stride(-1) == 1 else residual.contiguous()
    bm, bn, split, span, bk = tiles(c_out, t_out, c_in * ksize)
    work = torch.empty(split, c_out, t_out, dtype=torch.float32, device=x.device) if split > 1 else dummy
    launch = overlap.launch(x.device)
    grid = (triton.cdiv(c_out, bm), triton.cdiv(t_out, bn))
    count = split_sums.counters(x.device, grid[0] * grid[1]) if split > 1 else dummy
    args = (x, dummy if tail is None else tail, weight, dummy if bias is None else bias, res, out, work, count,
            c_out, t_in, t_out, tail_len, stride, dilation, 0.0 if elu is None else elu,
            x.stride(1), 0 if tail is None else tail.stride(1), weight.stride(0), res.stride(1), out.stride(1),
            work.stride(0) if split > 1 else 0)
    meta = dict(KK=c_in * ksize, KSIZE=ksize, ELU=elu is not None, HAS_BIAS=bias is not None,
                HAS_RES=residual is not None, BM=bm, BN=bn, BK=bk, SPLIT=split, KSPAN=span, PREC=PRECISION,
                num_warps=4, **launch)
    _conv_kernel[(*grid, split)](*args, **meta)
    if tail is not None:
        _tail_kernel[(c_in,)](x, tail, t_in, tail_len, 0.0 if elu is None else elu, x.stride(1), tail.stride(1),
                              ELU=elu is not None, BT=triton.next_power_of_2(tail_len), num_warps=1, **launch)
    return out
