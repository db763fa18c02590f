"""The K loop of the fused matrix-vector products (fused_linear.py): the prologue applied to
chunks of the input row (a norm's statistics over the whole row first, or the FFN's
activation), and the fp32 dot products of a tile of output rows against it, for float or int8
weights and for int4 weights (unpacked in registers)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def norm_stats(x_row, eps, K: tl.constexpr, NORM: tl.constexpr, BK: tl.constexpr):
    """(mean, rstd) of one input row for the prologue's norm: RMS (NORM 1) or layer norm (2)."""
    mean = 0.0
    rstd = 1.0
    if NORM == 1:
        ss = tl.zeros([BK], tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            v = tl.load(x_row + ks, mask=ks < K, other=0.0).to(tl.float32)
            ss += v * v
        rstd = tl.math.rsqrt(eps + tl.sum(ss, axis=0) / K)
    if NORM == 2:
        s1 = tl.zeros([BK], tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            s1 += tl.load(x_row + ks, mask=ks < K, other=0.0).to(tl.float32)
        mean = tl.sum(s1, axis=0) / K
        s2 = tl.zeros([BK], tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            v = tl.load(x_row + ks, mask=ks < K, other=0.0).to(tl.float32)
            v = tl.where(ks < K, v - mean, 0.0)
            s2 += v * v
        rstd = tl.math.rsqrt(tl.sum(s2, axis=0) / K + eps)
    return mean, rstd


@triton.jit
def prologue_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, NORM: tl.constexpr, ACT: tl.constexpr):
    """Chunk `ks` of one input row after the prologue (norm, or the FFN's activation), each
    step rounded to the activations' dtype where torch's modules round, returned in fp32."""
    dt = x_row.dtype.element_ty
    x = tl.load(x_row + ks, mask=k_ok, other=0.0).to(tl.float32)
    if NORM == 1:
        alpha = tl.load(NW + ks, mask=k_ok, other=0.0).to(tl.float32)
        x = (x * (alpha * rstd)).to(dt).to(tl.float32)
    if NORM == 2:
        g = tl.load(NW + ks, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.load(NB + ks, mask=k_ok, other=0.0).to(tl.float32)
        x = ((x - mean) * rstd * g + b).to(dt).to(tl.float32)
    if ACT == 1:  # silu(a) * b, each rounded as torch rounds it
        b = tl.load(x_row + gate_off + ks, mask=k_ok, other=0.0).to(tl.float32)
        a = (x / (1.0 + tl.exp(-x))).to(dt).to(tl.float32)
        x = (a * b).to(dt).to(tl.float32)
    if ACT == 2:  # exact GELU
        x = (0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))).to(dt).to(tl.float32)
    return x


@triton.jit
def first_tile(W, offs_n, n_ok, sw_n, K: tl.constexpr, BK: tl.constexpr):
    """The first [BN, BK] tile of float or int8 weights, as dot_dense takes it: loaded before
    a kernel waits for the one before it (weights are never written by a kernel)."""
    ks = tl.arange(0, BK)
    return tl.load(W + offs_n[:, None] * sw_n + ks[None, :], mask=n_ok[:, None] & (ks < K)[None, :], other=0.0)


@triton.jit
def dense_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, ss, NORM: tl.constexpr, ACT: tl.constexpr):
    """(chunk `ks` of the row as dot_dense multiplies it, ss plus its squares). An RMSNorm
    (NORM 1) is applied in one pass: the chunk times alpha, its squares summed on the way, the
    sums scaled by 1 / rms once at the end (dot_dense), so no program waits for the row's
    statistics before its first product; any other prologue as prologue_chunk applies it."""
    if NORM == 1:
        x = tl.load(x_row + ks, mask=k_ok, other=0.0).to(tl.float32)
        ss += x * x
        x = x * tl.load(NW + ks, mask=k_ok, other=0.0).to(tl.float32)
    else:
        x = prologue_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, NORM, ACT)
    return x, ss


@triton.jit
def dot_dense(x_row, w_first, W, offs_n, n_ok, sw_n, NW, NB, mean, rstd, eps, gate_off,
               K: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The fp32 sums of BN output rows of float or int8 weights against the prologue's row,
    the first chunk's weights given (first_tile). A [BN, BK] accumulator, reduced once at the
    end; the first chunk is added as the loop adds the others. With an RMSNorm (NORM 1) the
    row is normalized in the same pass (dense_chunk): (w . (alpha x)) / rms(x), the normalized
    row never rounded to the activations' dtype (the torch formula rounds it: the two differ
    by that rounding, well inside the product's own)."""
    acc = tl.zeros([BN, BK], tl.float32)
    ss = tl.zeros([BK], tl.float32)
    ks = tl.arange(0, BK)
    x, ss = dense_chunk(x_row, ks, ks < K, NW, NB, mean, rstd, gate_off, ss, NORM, ACT)
    acc += w_first.to(tl.float32) * x[None, :]
    for k0 in range(BK, K, BK):
        ks = k0 + tl.arange(0, BK)
        k_ok = ks < K
        x, ss = dense_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, ss, NORM, ACT)
        w = tl.load(W + offs_n[:, None] * sw_n + ks[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0.0).to(tl.float32)
        acc += w * x[None, :]
    y = tl.sum(acc, axis=1)
    if NORM == 1:
        y = y * tl.math.rsqrt(eps + tl.sum(ss, axis=0) / K)
    return y


@triton.jit
def nibble(word, x, SHIFT: tl.constexpr, T: tl.constexpr):
    """(q - 8) * x for the nibble at bit 4 * T of `word >> SHIFT` (q its stored value), the
    input times 16**-T: OR-ing the nibble into the mantissa of 2**23 gives the float
    2**23 + q * 16**T, so one subtraction makes (q - 8) * 16**T exactly, without a conversion
    instruction (T <= 4 keeps the nibble inside the mantissa)."""
    f = ((word >> SHIFT) & (15 << (4 * T)) | 0x4B000000).to(tl.float32, bitcast=True)
    return (f - (8388608.0 + 8.0 * 16.0 ** T)) * x


@triton.jit
def split8(x8):
    """[R, 8] -> its eight columns, in order."""
    a, b = tl.split(tl.reshape(x8, [x8.shape[0], 4, 2]))  # columns 0 2 4 6 | 1 3 5 7
    a0, a1 = tl.split(tl.reshape(a, [x8.shape[0], 2, 2]))  # 0 4 | 2 6
    b0, b1 = tl.split(tl.reshape(b, [x8.shape[0], 2, 2]))  # 1 5 | 3 7
    c0, c4 = tl.split(a0)
    c2, c6 = tl.split(a1)
    c1, c5 = tl.split(b0)
    c3, c7 = tl.split(b1)
    return c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def dot_int4(x_row, W, WS, offs_n, n_ok, sw_n, ss_n, NW, NB, mean, rstd, gate_off,
              K: tl.constexpr, GROUP: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr):
    """The same for int4 weights, read as 32-bit words (W: int32 [N, K / 8]): nibble t of word
    w is input 8w + t. Each word column takes its eight inputs in one load; each group's
    products are summed, then times the group's scale."""
    WORDS: tl.constexpr = BK // 8
    G: tl.constexpr = BK // GROUP
    acc = tl.zeros([BN, G], tl.float32)
    t = tl.arange(0, 8)[None, :]
    for k0 in range(0, K, BK):
        ws = k0 // 8 + tl.arange(0, WORDS)
        ks = 8 * ws[:, None] + t
        x = prologue_chunk(x_row, ks, ks < K, NW, NB, mean, rstd, gate_off, NORM, ACT)
        x = x * tl.exp2(-4.0 * tl.where(t < 5, t, t - 3).to(tl.float32))  # nibble's 16**-T
        x0, x1, x2, x3, x4, x5, x6, x7 = split8(x)
        # Words past the row read as 0x88888888 (eight zero weights), past groups' scales as zero.
        word = tl.load(W + offs_n[:, None] * sw_n + ws[None, :], mask=n_ok[:, None] & (ws < K // 8)[None, :],
                       other=-2004318072)
        part = (nibble(word, x0[None, :], 0, 0) + nibble(word, x1[None, :], 0, 1)
                + nibble(word, x2[None, :], 0, 2) + nibble(word, x3[None, :], 0, 3)
                + nibble(word, x4[None, :], 0, 4) + nibble(word, x5[None, :], 12, 2)
                + nibble(word, x6[None, :], 12, 3) + nibble(word, x7[None, :], 12, 4))
        gs = k0 // GROUP + tl.arange(0, G)
        s = tl.load(WS + offs_n[:, None] * ss_n + gs[None, :], mask=n_ok[:, None] & (gs * GROUP < K)[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(tl.reshape(part, [BN, G, GROUP // 8]), axis=2) * s
    return tl.sum(acc, axis=1)


@triton.jit
def dot_int4_bytes(x_row, W, WS, offs_n, n_ok, sw_n, ss_n, NW, NB, mean, rstd, gate_off,
                   K: tl.constexpr, GROUP: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr,
                   BN: tl.constexpr, BK: tl.constexpr):
    """dot_int4 for rows that are not whole 32-bit words (a small model's odd widths), byte by
    byte: byte j holds inputs 2j (low nibble) and 2j + 1 (high), each as q + 8."""
    acc = tl.zeros([BN, BK // 2], tl.float32)
    for k0 in range(0, K, BK):
        jb = k0 // 2 + tl.arange(0, BK // 2)
        even = 2 * jb
        xe = prologue_chunk(x_row, even, even < K, NW, NB, mean, rstd, gate_off, NORM, ACT)
        xo = prologue_chunk(x_row, even + 1, even + 1 < K, NW, NB, mean, rstd, gate_off, NORM, ACT)
        tile_ok = n_ok[:, None] & (jb < K // 2)[None, :]
        b = tl.load(W + offs_n[:, None] * sw_n + jb[None, :], mask=tile_ok, other=0x88).to(tl.int32)
        s = tl.load(WS + offs_n[:, None] * ss_n + (even // GROUP)[None, :], mask=tile_ok, other=0.0).to(tl.float32)
        acc += (((b & 15) - 8).to(tl.float32) * xe[None, :] + ((b >> 4) - 8).to(tl.float32) * xo[None, :]) * s
    return tl.sum(acc, axis=1)
