"""Products for a wake's rows (more than fused_linear's MAX_ROWS, up to MAX_WAKE_ROWS, or fewer
with a LoRA), with the layer's elementwise work and a DiffuPlex LoRA correction fused in.

fused_linear runs one program per (output tile, row): past a few rows each row's program
reads the weight tile again (from L2 at best). Here ONE program per tile of BN output
features covers all rows, padded to BM = 16 or 32, and multiplies them on the tensor cores
(tl.dot, fp32 accumulation): each weight is read from memory once per wake.

- Weights: bf16/fp32 as they are; int8 converted to the activations' dtype exactly
  (|q| <= 127), the row scale applied to the fp32 result; int4 unpacked exactly (nibble - 8),
  one dot per group of GROUP inputs (even and odd inputs against the low and high nibbles)
  times the group's scale. Int4 is read byte by byte and converted with the ordinary
  instruction, not gemv_dots' words and 2**23 trick: the tensor cores want a [BN, 32] tile of
  nibbles in input order, and whether the conversion bounds a tile of 16-32 rows is for
  tests/gpu/bench_rows_linear.py to say. fp32 activations use tl.dot with input_precision="ieee": exact
  fp32 products, the same code as bf16's (a separate FMA loop would be a second K loop to
  keep right, for tests and small models only).
- Prologue (norm, the FFN's gate or GELU) and the LoRA's down-projection t = x[-r:] @ A.T in
  one small kernel of one program per row (`_lead_kernel`): the norm's statistics are per
  row, and the LoRA needs the prologue's rows anyway.
- Epilogues, over all rows: plain store, residual (+ per-channel scale), and the QKV split
  with RoPE writing K/V into the ring at slots (pos + row) % ring, fused_linear's formulas per
  row. Before any of them, the LoRA rows get t @ (scale * B).T added.

A projection is therefore at most two launches. Rounding follows the torch formulas
(engine.transformer, engine.families.diffuplex.predictor's add_delta): the product rounded to
the activations' dtype, then y + t @ B'.T rounded once (B' = B * scale rounded to B's dtype,
t = x @ A.T rounded to A's dtype then to y's), as addmm_ rounds. Where it differs: the order
of the fp32 sums (tl.dot's, and an int4 group's sum scaled after summing instead of each
weight dequantized first). Tile sizes depend on the static shape only and there is no
split-K: eager and graph-replayed calls give the same bits.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from . import MAX_WAKE_ROWS
from .gemv_dots import norm_stats, prologue_chunk
from .operands import Int4Weight, Int8Weight, Norm

Weight = torch.Tensor | Int8Weight | Int4Weight
Lora = tuple  # (a [rank, K], b [N, rank], scale: float, rows: int): the last `rows` rows corrected

_NORM = {None: 0, "rms": 1, "layer": 2}
_ACT = {None: 0, "silu_gate": 1, "gelu": 2}
_EPI_STORE, _EPI_RESIDUAL, _EPI_QKV = 0, 1, 2


@triton.jit
def _op(v, dt: tl.constexpr, UPCAST: tl.constexpr):
    """v as a tl.dot operand: in the activations' dtype, or fp32 (see _UPCAST)."""
    if UPCAST:
        return v.to(tl.float32)
    return v.to(dt)


@triton.jit
def _lead_kernel(X, OUT, A, T, sx_m, so_m, sa_r, st_m, NW, NB, eps, gate_off, row0, lora_first,
                 K: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr, PRO: tl.constexpr,
                 LORA: tl.constexpr, RANK: tl.constexpr, RP: tl.constexpr, BK: tl.constexpr):
    """Row row0 + program: the prologue's row (stored when PRO) and, for the LoRA rows, its
    product with A, reduced once at the end and rounded as torch rounds it."""
    m = row0 + tl.program_id(0)
    x_row = X + m * sx_m
    dt = X.dtype.element_ty
    lr = m - lora_first
    rr = tl.arange(0, RP)
    r_ok = (rr < RANK) & (tl.zeros([RP], tl.int32) + lr >= 0)  # a vector: the interpreter masks with no scalar
    acc = tl.zeros([RP, BK], tl.float32)
    mean, rstd = norm_stats(x_row, eps, K, NORM, BK)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        k_ok = ks < K
        x = prologue_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, NORM, ACT)
        if PRO:
            tl.store(OUT + m * so_m + ks, x.to(dt), mask=k_ok)
        if LORA:
            a = tl.load(A + rr[:, None] * sa_r + ks[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
            acc += a.to(tl.float32) * x.to(A.dtype.element_ty).to(tl.float32)[None, :]
    if LORA:
        t = tl.sum(acc, axis=1).to(A.dtype.element_ty).to(dt)
        tl.store(T + lr * st_m + rr, t, mask=r_ok)


@triton.jit
def _rows_kernel(X, W, WS, OUT, M, N, sx_m, sw_n, ss_n, so_m,
                 RES, SCALE, sr_m,
                 POS, KV, ring, skv_r, skv_c, skv_h, skv_d, sq_m, sq_h, d_model, rope_coef,
                 T, LB, lscale, st_m, slb_n, lora_first,
                 K: tl.constexpr, INT8: tl.constexpr, INT4: tl.constexpr, GROUP: tl.constexpr,
                 EPI: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_ROPE: tl.constexpr, HEAD_DIM: tl.constexpr,
                 LORA: tl.constexpr, LSCALE: tl.constexpr, RANK: tl.constexpr, RP: tl.constexpr,
                 PREC: tl.constexpr, UPCAST: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    n_ok = offs_n < N
    rows = tl.arange(0, BM)
    m_ok = rows < M
    dt = X.dtype.element_ty
    acc = tl.zeros([BM, BN], tl.float32)
    if INT4:  # BK // GROUP groups per iteration, each its own load and dots: more bytes in flight
        HALF: tl.constexpr = GROUP // 2
        for k0 in range(0, K, BK):
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
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < K
            x = tl.load(X + rows[:, None] * sx_m + ks[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(W + offs_n[:, None] * sw_n + ks[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(_op(x, dt, UPCAST), tl.trans(_op(w, dt, UPCAST)), acc, input_precision=PREC)
    if INT8:  # each output row's scale, applied once to the fp32 sum (engine.ops.linear.matmul)
        acc = acc * (tl.load(WS + offs_n, mask=n_ok, other=0.0) / 127.0)[None, :]
    y = acc.to(dt).to(tl.float32)  # the product, rounded as torch's is
    if LORA:  # y + t @ B'.T, one rounding (addmm_); rows before lora_first load t = 0
        lr = rows - lora_first
        rr = tl.arange(0, RP)
        r_ok = rr < RANK
        t = tl.load(T + lr[:, None] * st_m + rr[None, :], mask=((lr >= 0) & m_ok)[:, None] & r_ok[None, :],
                    other=0.0)
        bw = tl.load(LB + offs_n[:, None] * slb_n + rr[None, :], mask=n_ok[:, None] & r_ok[None, :], other=0.0)
        if LSCALE:
            bw = (bw.to(tl.float32) * lscale).to(LB.dtype.element_ty)
        y = tl.dot(_op(t, dt, UPCAST), tl.trans(_op(bw, dt, UPCAST)), y, input_precision=PREC)
        y = y.to(dt).to(tl.float32)

    tile = m_ok[:, None] & n_ok[None, :]
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


_UPCAST = os.environ.get("TRITON_INTERPRET") == "1"
"""Whether tl.dot's operands are widened to fp32 first: only under Triton's interpreter, whose
dot multiplies a bf16 tensor's raw 16-bit patterns as integers (triton 3.9,
interpreter.create_dot). The values are the same: a product of two bf16 numbers is exact in
fp32, as on the tensor cores."""


class _Config(NamedTuple):
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int


def _config(M: int, N: int, K: int, dtype: torch.dtype, group: int | None = None) -> _Config:
    """Tile sizes from the static shape only (the order of the fp32 sums depends on them).
    The widest BN that still gives about two programs per multiprocessor of an H200 (132),
    so the weight loads of enough programs are in flight; int4 (`group`: its inputs per scale)
    takes four groups per iteration. Not yet measured (tests/gpu/bench_rows_linear.py)."""
    bn = next((b for b in (64, 32) if triton.cdiv(N, b) >= 256), 16)
    if group is not None:
        bk = group * min(4, triton.cdiv(K, group))
    else:
        bk = min(64 if dtype == torch.float32 else 128, max(16, triton.next_power_of_2(K)))
    return _Config(16 if M <= 16 else 32, bn, bk, 4, 3)


def _norm_args(norm: Norm | None, dummy: torch.Tensor) -> tuple:
    if norm is None:
        return dummy, dummy, 0.0
    return norm.weight, norm.bias if norm.bias is not None else norm.weight, norm.eps


def _lead(x: torch.Tensor, k: int, norm: Norm | None, act: str | None, lora: Lora | None):
    """(the product's input rows, the LoRA's t [rows, rank] or None) in one launch, or x
    itself when there is neither a prologue nor a LoRA."""
    pro = norm is not None or act is not None
    if not pro and lora is None:
        return x, None
    M = x.shape[0]
    out = torch.empty(M, k, dtype=x.dtype, device=x.device) if pro else x
    a, t, rank, first = x, x, 1, M
    if lora is not None:
        a, b, _, rows = lora
        rank, first = a.shape[0], M - rows
        if a.shape[1] != k or a.stride(1) != 1 or not 0 < rows <= M:
            raise ValueError(f"rows linear: LoRA A {tuple(a.shape)} for {M} rows of {k} ({rows} corrected)")
        t = torch.empty(rows, rank, dtype=x.dtype, device=x.device)
    row0 = 0 if pro else first
    nw, nb, eps = _norm_args(norm, x)
    _lead_kernel[(M - row0,)](x, out, a, t, x.stride(0), out.stride(0), a.stride(0), t.stride(0),
                              nw, nb, eps, k, row0, first, K=k, NORM=_NORM[None if norm is None else norm.kind],
                              ACT=_ACT[act], PRO=pro, LORA=lora is not None, RANK=rank,
                              RP=max(16, triton.next_power_of_2(rank)),
                              BK=min(512, triton.next_power_of_2(k)), num_warps=8)  # the [RP, BK] fp32 sum in registers
    return out, (t if lora is not None else None)


def _launch(x, w, out, *, k: int, norm=None, act=None, epi: int = _EPI_STORE, residual=None, scale=None,
            qkv=None, lora: Lora | None = None):
    M = x.shape[0]
    ws, group, ss_n = x, 64, 0  # placeholders where the weights are not quantized
    if isinstance(w, Int8Weight):
        w, ws = w.q, w.scb
    int4 = isinstance(w, Int4Weight)
    if int4:
        w, ws, group, ss_n = w.q, w.scale, w.group, w.scale.stride(0)
    N = w.shape[0]
    if not 1 <= M <= MAX_WAKE_ROWS or w.stride(1) != 1 or w.shape[1] * (2 if int4 else 1) != k \
            or (int4 and group < 32):
        raise ValueError(f"rows linear: {M} rows of {k} against weight {tuple(w.shape)}")
    x, t = _lead(x, k, norm, act, lora)
    cfg = _config(M, N, k, x.dtype, group if int4 else None)
    dummy = x
    res, res_scale, sr_m = (dummy, dummy, 0) if residual is None else (residual, scale if scale is not None
                                                                       else dummy, residual.stride(0))
    pos, kv, ring, skv, sq_m, sq_h, d_model, coef, head_dim, has_rope = (dummy, dummy, 1, (0, 0, 0, 0), 0, 0, 1,
                                                                         0.0, 2, False)
    if qkv is not None:
        pos, kv, q_out, coef, head_dim = qkv
        ring, skv = kv.shape[0], kv.stride()
        sq_m, sq_h, d_model = q_out.stride(0), q_out.stride(1), N // 3
        has_rope = coef is not None
        coef = coef or 0.0
    lb, lscale, slb_n, first, rank = dummy, 1.0, 0, M, 1
    if lora is not None:
        _, lb, lscale, rows = lora
        rank, first, slb_n = lb.shape[1], M - rows, lb.stride(0)
        if lb.shape[0] != N or lb.stride(1) != 1 or t.shape[1] != rank:
            raise ValueError(f"rows linear: LoRA B {tuple(lb.shape)} for {N} outputs of rank {t.shape[1]}")
    _rows_kernel[(triton.cdiv(N, cfg.bn),)](
        x, w, ws, out, M, N, x.stride(0), w.stride(0), ss_n, out.stride(0),
        res, res_scale, sr_m,
        pos, kv, ring, *skv, sq_m, sq_h, d_model, coef,
        dummy if t is None else t, lb, float(lscale), 0 if t is None else t.stride(0), slb_n, first,
        K=k, INT8=w.dtype == torch.int8, INT4=int4, GROUP=group, EPI=epi, HAS_SCALE=scale is not None,
        HAS_ROPE=has_rope, HEAD_DIM=head_dim, LORA=lora is not None, LSCALE=lscale != 1.0, RANK=rank,
        RP=max(16, triton.next_power_of_2(rank)), PREC="ieee" if x.dtype == torch.float32 or _UPCAST else "tf32",
        UPCAST=_UPCAST,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def _rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"rows linear: input must be [rows, K] with unit column stride, got {tuple(x.shape)}")
    return x


def linear(x: torch.Tensor, w: Weight, *, norm: Norm | None = None, act: str | None = None,
           residual: torch.Tensor | None = None, scale: torch.Tensor | None = None,
           lora: Lora | None = None) -> torch.Tensor:
    """x [M, K] (or [M, 2K] for act="silu_gate") @ w[N, K].T -> [M, N]: `norm` or `act`
    applied to x first, the LoRA's rows corrected, `residual` (+ scale * product) added after."""
    x = _rows(x)
    k = x.shape[1] // 2 if act == "silu_gate" else x.shape[1]
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    if residual is not None and (residual.shape != out.shape or residual.stride(1) != 1):
        raise ValueError(f"rows linear: residual {tuple(residual.shape)} for output {tuple(out.shape)}")
    return _launch(x, w, out, k=k, norm=norm, act=act, epi=_EPI_STORE if residual is None else _EPI_RESIDUAL,
                   residual=residual, scale=scale, lora=lora)


def qkv_into_ring(x: torch.Tensor, w: Weight, norm: Norm | None, pos: torch.Tensor, kv: torch.Tensor,
                  heads: int, rope_coef: float | None, lora: Lora | None = None) -> torch.Tensor:
    """fused_linear.qkv_into_ring for a wake's rows, the LoRA's rows corrected before RoPE:
    q as [1, H, M, D], k and v written into the ring kv [ring, 2, H, D] at (pos + row) % ring."""
    x = _rows(x)
    M, D = x.shape[0], kv.shape[-1]
    q = torch.empty(M, heads, D, dtype=x.dtype, device=x.device)
    if kv.shape[1:] != (2, heads, D) or w.shape[0] != 3 * heads * D:
        raise ValueError(f"rows qkv: weight {tuple(w.shape)} against ring {tuple(kv.shape)}")
    _launch(x, w, q, k=x.shape[1], norm=norm, epi=_EPI_QKV, qkv=(pos, kv, q, rope_coef, D), lora=lora)
    return q.permute(1, 0, 2).unsqueeze(0)
