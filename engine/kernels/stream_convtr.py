"""A streaming causal transposed convolution of one chunk (batch 1, fp32, ungrouped: SEANet's
upsamplings) in two kernels, with the partial sums kept for the next chunk as the torch formula
of engine.families.moshi.mimi.streaming_conv keeps them.

A transposed convolution is a product then an overlap-add: cols[(o, j), q] = sum over i of
w[i, o, j] * x[i, q] (the weights [C_in, C_out * K] read as they lie, the ELU applied to the chunk
as it is loaded), then y[o, q * stride + j] sums the columns landing there, plus the bias. The
first kernel is the product, its depth split over programs where the layer has few output tiles
(fp32 partial sums, as in stream_conv). The second adds the splits in order and the landing
columns in tap order, adds the bias and the partial sums the previous chunk left (its first
K - stride samples), then writes the chunk's stride * T samples, and the next partial sums (the
rest, bias excluded) to scratch, copied over the kept ones after: its programs still read them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap, split_sums, stream_conv
from .stream_conv import _elu


@triton.jit
def _columns_kernel(X, W, WORK, rows, c_in, t_in, alpha, sx_c, sw_s,
                    ELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    KSPAN: tl.constexpr, PREC: tl.constexpr, PDL: tl.constexpr):
    """Grid (row tiles, time tiles, splits): WORK[split, row, q] = the split's share of
    sum over i of W[i, row] * elu(X[i, q]), rows = C_out * K."""
    overlap.enter(PDL)
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    q = tl.program_id(1) * BN + tl.arange(0, BN)
    r_ok = r < rows
    q_ok = q < t_in
    acc = tl.zeros([BM, BN], tl.float32)
    first = tl.program_id(2) * KSPAN
    for k0 in range(first, first + KSPAN, BK):
        i = k0 + tl.arange(0, BK)
        i_ok = i < c_in
        x = tl.load(X + i[:, None] * sx_c + q[None, :], mask=i_ok[:, None] & q_ok[None, :], other=0.0)
        if ELU:
            x = _elu(x, alpha)
        w = tl.load(W + i[None, :] * rows + r[:, None], mask=r_ok[:, None] & i_ok[None, :], other=0.0)
        acc = tl.dot(w, x, acc, input_precision=PREC)
    tl.store(WORK + tl.program_id(2) * sw_s + r[:, None] * t_in + q[None, :], acc,
             mask=r_ok[:, None] & q_ok[None, :])


@triton.jit
def _overlap_add_kernel(WORK, BIAS, PARTIAL, OUT, PENDING, c_out, t_in, sw_s, sp_c, so_c,
                        STRIDE: tl.constexpr, KSIZE: tl.constexpr, TAPS: tl.constexpr, OVERLAP: tl.constexpr,
                        HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, BO: tl.constexpr, BT: tl.constexpr,
                        PDL: tl.constexpr):
    """Grid (channel tiles, time tiles) over the chunk's stride * T_in + OVERLAP positions."""
    overlap.enter(PDL)
    o = tl.program_id(0) * BO + tl.arange(0, BO)
    t = tl.program_id(1) * BT + tl.arange(0, BT)
    emitted = t_in * STRIDE
    o_ok = o < c_out
    t_ok = t < emitted + OVERLAP
    phase, q = t % STRIDE, t // STRIDE
    y = tl.zeros([BO, BT], tl.float32)
    for m in tl.static_range(TAPS):  # the taps j = phase + m * STRIDE, from the input q - m
        j = phase + m * STRIDE
        src = q - m
        ok = o_ok[:, None] & (t_ok & (j < KSIZE) & (src >= 0) & (src < t_in))[None, :]
        at = WORK + (o[:, None] * KSIZE + j[None, :]) * t_in + src[None, :]
        y += split_sums.added(at, sw_s, ok, BO, BT, SPLIT)
    bias = tl.zeros([BO], tl.float32)
    if HAS_BIAS:
        bias = tl.load(BIAS + o, mask=o_ok, other=0.0)
    y = y + bias[:, None]
    early = t < OVERLAP
    kept = tl.load(PARTIAL + o[:, None] * sp_c + t[None, :], mask=o_ok[:, None] & early[None, :], other=0.0)
    y = tl.where(early[None, :], y + kept, y)
    out_ok = o_ok[:, None] & (t < emitted)[None, :]
    tl.store(OUT + o[:, None] * so_c + t[None, :], y, mask=out_ok)
    late = t_ok & (t >= emitted)
    tl.store(PENDING + o[:, None] * OVERLAP + (t - emitted)[None, :], y - bias[:, None],
             mask=o_ok[:, None] & late[None, :])


def tiles(rows: int, t_in: int, c_in: int) -> tuple[int, int, int, int, int]:
    """(BM, BN, split, KSPAN, BK) of the product: a function of the layer's shape only. Its
    output tiles are few and wide (rows = C_out * K), so it splits the depth towards four
    programs a multiprocessor (twice stream_conv's), in chunks as stream_conv.chunk takes them."""
    bm, bn = 64, max(16, min(64, triton.next_power_of_2(t_in)))
    programs = triton.cdiv(rows, bm) * triton.cdiv(t_in, bn)
    bk = stream_conv.chunk(c_in)
    split = max(1, min(8, triton.cdiv(2 * stream_conv._BUSY, programs), c_in // stream_conv._MIN_SPAN))
    span = triton.cdiv(triton.cdiv(c_in, split), bk) * bk
    return bm, bn, triton.cdiv(c_in, span), span, bk


def stream_conv_transpose(x: torch.Tensor, partial: torch.Tensor | None, weight: torch.Tensor,
                          bias: torch.Tensor | None, stride: int, elu: float | None) -> torch.Tensor:
    """x [1, C_in, T] (the chunk, before the ELU when `elu` is its alpha), partial [1, C_out,
    K - stride] (the sums kept from the chunks before, bias excluded; None when K = stride),
    weight [C_in, C_out, K >= stride] -> [1, C_out, stride * T]; `partial` then holds this
    chunk's. The products' arithmetic is stream_conv.PRECISION."""
    c_in, c_out, ksize = weight.shape
    t_in = x.shape[-1]
    over = ksize - stride
    if x.shape[:2] != (1, c_in) or x.dtype != weight.dtype or over < 0 or (
            (partial is None) != (over == 0)) or (partial is not None and partial.shape != (1, c_out, over)):
        raise ValueError(f"stream transposed conv: chunk {tuple(x.shape)}, partial "
                         f"{None if partial is None else tuple(partial.shape)}, weight {tuple(weight.shape)}, "
                         f"stride {stride}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    rows = c_out * ksize
    bm, bn, split, span, bk = tiles(rows, t_in, c_in)
    work = torch.empty(split, rows, t_in, dtype=torch.float32, device=x.device)
    launch = overlap.launch(x.device)
    _columns_kernel[(triton.cdiv(rows, bm), triton.cdiv(t_in, bn), split)](
        x, weight, work, rows, c_in, t_in, 0.0 if elu is None else elu, x.stride(1), work.stride(0),
        ELU=elu is not None, BM=bm, BN=bn, BK=bk, KSPAN=span, PREC=stream_conv.PRECISION, num_warps=4, **launch)
    out = torch.empty(1, c_out, stride * t_in, dtype=x.dtype, device=x.device)
    pending = torch.empty(1, c_out, max(over, 1), dtype=torch.float32, device=x.device)
    kept = pending if partial is None else partial
    bt = min(128, triton.next_power_of_2(stride * t_in + over))
    _overlap_add_kernel[(triton.cdiv(c_out, 4), triton.cdiv(stride * t_in + over, bt))](
        work, x if bias is None else bias, kept, out, pending, c_out, t_in, work.stride(0), kept.stride(1),
        out.stride(1), STRIDE=stride, KSIZE=ksize, TAPS=triton.cdiv(ksize, stride), OVERLAP=over,
        HAS_BIAS=bias is not None, SPLIT=split, BO=4, BT=bt, num_warps=4, **launch)
    if partial is not None:
        partial.copy_(pending)
    return out
