"""The Triton kernels of the many-row products, launched by rows_linear.py (which says what they
compute and how they round). Both split K when the shape alone would not keep the GPU busy, and stay
deterministic: each split writes its fp32 partial sum to a workspace, summed in split order
(split_sums), so the bits depend on the static shape only.
- `lead_kernel`, grid (rows, splits): the prologue's rows (norm, the FFN's gate or GELU) and, for
  the LoRA rows, the partial products with A.
- `rows_kernel`, PHASE 0, grid (output tiles, splits): one tile of BN outputs over all rows (padded
  to BM) on the tensor cores, then the epilogue if K is not split, else its partial sum, the tile's
  last program to finish summing them and running the epilogue. With K split, no prologue and float
  weights (LORA_TILE), PHASE 0's grid has one more column of programs whose tile of "outputs" is the
  LoRA's A, storing the down-projection's partials where lead_kernel does (no lead launch); there
  PHASE 1, grid (output tiles,), sums them and runs the epilogue once all are stored.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import overlap, split_sums
from .gemv_dots import norm_stats, prologue_chunk


@triton.jit
def _op(v, dt: tl.constexpr, UPCAST: tl.constexpr):
    """v as a tl.dot operand: in the activations' dtype, or fp32 (rows_linear._UPCAST)."""
    if UPCAST:
        return v.to(tl.float32)
    return v.to(dt)


@triton.jit
def lead_kernel(X, OUT, A, T, sx_m, so_m, sa_r, st_s, st_m, NW, NB, eps, gate_off, row0, lora_first,
                K: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr, PRO: tl.constexpr,
                LORA: tl.constexpr, RANK: tl.constexpr, RP: tl.constexpr, BK: tl.constexpr,
                KSPAN: tl.constexpr, PDL: tl.constexpr):
    """Row row0 + program_id(0), inputs from program_id(1) * KSPAN: the prologue's chunk
    (stored when PRO) and, for the LoRA rows, the fp32 partial product with A (into T)."""
    overlap.enter(PDL)
    m = row0 + tl.program_id(0)
    k_first = tl.program_id(1) * KSPAN
    x_row = X + m * sx_m
    dt = X.dtype.element_ty
    lr = m - lora_first
    rr = tl.arange(0, RP)
    r_ok = (rr < RANK) & (tl.zeros([RP], tl.int32) + lr >= 0)  # a vector: the interpreter masks with no scalar
    acc = tl.zeros([RP, BK], tl.float32)
    mean, rstd = norm_stats(x_row, eps, K, NORM, BK)  # over the whole row, in every split
    for k0 in range(k_first, k_first + KSPAN, BK):
        ks = k0 + tl.arange(0, BK)
        k_ok = ks < K
        x = prologue_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, NORM, ACT)
        if PRO:
            tl.store(OUT + m * so_m + ks, x.to(dt), mask=k_ok)
        if LORA:
            a = tl.load(A + rr[:, None] * sa_r + ks[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
            acc += a.to(tl.float32) * x.to(A.dtype.element_ty).to(tl.float32)[None, :]
    if LORA:
        tl.store(T + tl.program_id(1) * st_s + lr * st_m + rr, tl.sum(acc, axis=1), mask=r_ok)


@triton.jit
def _product(X, W, WS, sx_m, sw_n, ss_n, offs_n, n_ok, rows, m_ok, k_first,
             K: tl.constexpr, INT4: tl.constexpr, GROUP: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KSPAN: tl.constexpr):
    """The fp32 sums of rows x outputs over inputs k_first .. k_first + KSPAN (int4: each
    group's sum times its scale; int8: before the row scale)."""
    dt = X.dtype.element_ty
    acc = tl.zeros([BM, BN], tl.float32)
    if INT4:  # BK // GROUP groups per iteration, each its own load and dots: more bytes in flight
        HALF: tl.constexpr = GROUP // 2
        for k0 in range(k_first, k_first + KSPAN, BK):
            for gi in tl.static_range(BK // GROUP):
                g0 = k0 + gi * GROUP
                jb = g0 // 2 + tl.arange(0, HALF)  # bytes: inputs 2j (low nibble) and 2j + 1 (high)
                j_ok = jb < K // 2
                b = tl.load(W + offs_n[:, None] * sw_n + jb[None, :], mask=n_ok[:, None] & j_ok[None, :],
                            other=0x88).to(tl.int32)  # past the row: zero weights
                lo = _op((b & 15) - 8, dt, UPCAST)  # exact: |q - 8| <= 8
                hi = _op((b >> 4) - 8, dt, UPCAST)
                x_ok = m_ok[:, None] & j_ok[None, :]
                xe = tl.load(X + rows[:, None] * sx_m + 2 * jb[None, :], mask=x_ok, other=0.0)
                xo = tl.load(X + rows[:, None] * sx_m + 2 * jb[None, :] + 1, mask=x_ok, other=0.0)
                part = tl.dot(_op(xe, dt, UPCAST), tl.trans(lo), input_precision=PREC)
                part = tl.dot(_op(xo, dt, UPCAST), tl.trans(hi), part, input_precision=PREC)
                g_ok = n_ok & (tl.zeros([BN], tl.int32) + g0 < K)  # no scale past the row (a NaN there * 0)
                s = tl.load(WS + offs_n * ss_n + g0 // GROUP, mask=g_ok, other=0.0).to(tl.float32)
                acc += part * s[None, :]
    else:
        for k0 in range(k_first, k_first + KSPAN, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < K
            x = tl.load(X + rows[:, None] * sx_m + ks[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(W + offs_n[:, None] * sw_n + ks[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(_op(x, dt, UPCAST), tl.trans(_op(w, dt, UPCAST)), acc, input_precision=PREC)
    return acc


@triton.jit
def rows_kernel(X, W, WS, OUT, M, N, sx_m, sw_n, ss_n, so_m,
                RES, SCALE, sr_m,
                POS, KV, ring, skv_r, skv_c, skv_h, skv_d, sq_m, sq_h, d_model, rope_coef,
                T, LA, LB, lscale, st_s, st_m, sa_r, slb_n, lora_first, WORK, sw_s, COUNT,
                K: tl.constexpr, INT8: tl.constexpr, INT4: tl.constexpr, GROUP: tl.constexpr, LORA_TILE: tl.constexpr,
                EPI: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROPE: tl.constexpr, HEAD_DIM: tl.constexpr,
                LORA: tl.constexpr, LSCALE: tl.constexpr, RANK: tl.constexpr, RP: tl.constexpr,
                LSPLIT: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr, BM: tl.constexpr,
                BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, KSPAN: tl.constexpr,
                PHASE: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    n_ok = offs_n < N
    rows = tl.arange(0, BM)
    m_ok = rows < M
    tile = m_ok[:, None] & n_ok[None, :]
    work = WORK + rows[:, None] * N + offs_n[None, :]
    dt = X.dtype.element_ty
    if PHASE == 0:
        wp, w_n, lora_down = W, sw_n, False
        if LORA_TILE:  # noqa: SIM102 (a compile-time test around a run-time one: other launches lack the branch)
            if tl.program_id(0) == tl.cdiv(N, BN):  # the column past the output tiles: A's rows
                wp, w_n, lora_down = LA, sa_r, True
                offs_n = tl.arange(0, BN)
                n_ok = offs_n < RANK
        acc = _product(X, wp, WS, sx_m, w_n, ss_n, offs_n, n_ok, rows, m_ok, tl.program_id(1) * KSPAN,
                       K, INT4, GROUP, PREC, UPCAST, BM, BN, BK, KSPAN)
        if lora_down:  # lead_kernel's partial products with A, for the LoRA rows
            lr = rows - lora_first
            tl.store(T + tl.program_id(1) * st_s + lr[:, None] * st_m + offs_n[None, :], acc,
                     mask=((lr >= 0) & m_ok)[:, None] & n_ok[None, :])
            return
        if SPLIT > 1:
            tl.store(work + tl.program_id(1) * sw_s, acc, mask=tile)
            if LORA_TILE:  # the epilogue needs every split of the down-projection: PHASE 1 finishes
                return
            if not split_sums.arrived_last(COUNT + tl.program_id(0), SPLIT):
                return
            acc = split_sums.added(work, sw_s, tile, BM, BN, SPLIT)
    else:
        acc = split_sums.added(work, sw_s, tile, BM, BN, SPLIT)
    if INT8:  # each output row's scale, applied once to the fp32 sum (engine.ops.linear.matmul)
        acc = acc * (tl.load(WS + offs_n, mask=n_ok, other=0.0) / 127.0)[None, :]
    y = acc.to(dt).to(tl.float32)  # the product, rounded as torch's is
    if LORA:  # y + t @ B'.T, one rounding (addmm_); rows before lora_first take t = 0
        lr = rows - lora_first
        rr = tl.arange(0, RP)
        t_ok = ((lr >= 0) & m_ok)[:, None] & (rr < RANK)[None, :]
        t = tl.zeros([BM, RP], tl.float32)
        for s in tl.static_range(LSPLIT):
            t += tl.load(T + s * st_s + lr[:, None] * st_m + rr[None, :], mask=t_ok, other=0.0)
        t = t.to(LA.dtype.element_ty).to(dt)  # x @ A.T rounded to A's dtype, then to y's
        bw = tl.load(LB + offs_n[:, None] * slb_n + rr[None, :], mask=n_ok[:, None] & (rr < RANK)[None, :],
                     other=0.0)
        if LSCALE:
            bw = (bw.to(tl.float32) * lscale).to(LB.dtype.element_ty)
        y = tl.dot(_op(t, dt, UPCAST), tl.trans(_op(bw, dt, UPCAST)), y, input_precision=PREC)
        y = y.to(dt).to(tl.float32)
    if EPI == 0:
        tl.store(OUT + rows[:, None] * so_m + offs_n[None, :], y.to(dt), mask=tile)
    if EPI == 1:
        if HAS_SCALE:
            y = (tl.load(SCALE + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :] * y).to(dt).to(tl.float32)
        r = tl.load(RES + rows[:, None] * sr_m + offs_n[None, :], mask=tile, other=0.0).to(tl.float32)
        tl.store(OUT + rows[:, None] * so_m + offs_n[None, :], (r + y).to(dt), mask=tile)
    if EPI == 2:  # fused_linear's QKV epilogue, each row at its own position
        pos = tl.load(POS) + rows
        section = offs_n // d_model
        head = (offs_n % d_model) // HEAD_DIM
        dim = offs_n % HEAD_DIM
        if HAS_ROPE:
            re, im = tl.split(tl.reshape(y, [BM, BN // 2, 2]))
            half, _ = tl.split(tl.reshape(dim, [BN // 2, 2]))
            angle = tl.exp((half // 2).to(tl.float32) * rope_coef)[None, :] * pos.to(tl.float32)[:, None]
            c = tl.cos(angle)
            s = tl.sin(angle)
            rotated = tl.reshape(tl.join(re * c - im * s, re * s + im * c), [BM, BN])
            y = tl.where((section < 2)[None, :], rotated, y)
        y = y.to(dt)
        tl.store(OUT + rows[:, None] * sq_m + (head * sq_h + dim)[None, :], y, mask=tile & (section == 0)[None, :])
        kv = KV + (pos % ring)[:, None] * skv_r + ((section - 1) * skv_c + head * skv_h + dim * skv_d)[None, :]
        tl.store(kv, y, mask=tile & (section > 0)[None, :])
