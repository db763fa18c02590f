"""Matrix-vector products for a few rows, elementwise work fused in: at batch 1 a frame is bound by
weight reads and launches, so each fused step saves a launch and a round trip to memory. One
`_gemv_kernel`, specialised by constexpr flags. Prologue, on each input chunk loaded: RMSNorm (a
dense product's within its K pass, the sums scaled by 1 / rms), LayerNorm (statistics first), a
gated FFN's SiLU gate or GELU (where cheaper, once in a kernel of its own: `_separate_prologue`).
Epilogue: a residual (optional layer scale), the QKV split with RoPE and K/V written to the ring at
a device-held position, a device-picked embedding row added, or a gated FFN's gate (rows n and
n + H: silu(a) * b). Weights: bf16/fp32, int8 (row scale on the fp32 sum) or int4 (32-bit words of
eight inputs unpacked in registers, scaled per group). Intermediates round to the activation dtype
where torch's formulas do (a dense RMSNorm's row stays fp32): the unfused result up to fp32 sum
order. One program per (BN output tile, row), a tile's rows adjacent (weights read once, then
cached); `_config` depends on the static shape only: eager and replayed products reduce alike.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from . import MAX_ROWS, overlap
from .gemv_dots import dot_dense, dot_int4, dot_int4_bytes, first_tile, norm_stats, prologue_chunk
from .operands import (
    GROUP_SIZE,
    Int4Weight,
    Int8Rows,
    Int8Weight,
    Norm,
    epilogue_args,
    norm_args,
    product_operands,
    rows_input,
)

Weight = torch.Tensor | Int8Weight | Int4Weight

_NORM = {None: 0, "rms": 1, "layer": 2}
_ACT = {None: 0, "silu_gate": 1, "gelu": 2}
_EPI_STORE, _EPI_RESIDUAL, _EPI_QKV, _EPI_EMBED, _EPI_GATE = 0, 1, 2, 3, 4


@triton.jit
def _gemv_kernel(X, W, WS, OUT, M, N, sx_m, sw_n, ss_n, so_m,
                 NW, NB, eps, gate_off,
                 RES, SCALE, sr_m,
                 POS, KV, ring, skv_r, skv_c, skv_h, skv_d, sq_m, sq_h, d_model, rope_coef,
                 TOK, EMB, ESC, semb,
                 K: tl.constexpr, INT8: tl.constexpr, INT4: tl.constexpr, WORDS: tl.constexpr, GROUP: tl.constexpr,
                 NORM: tl.constexpr, ACT: tl.constexpr, EPI: tl.constexpr,
                 HAS_SCALE: tl.constexpr, EMB_INT8: tl.constexpr,
                 HAS_ROPE: tl.constexpr, HEAD_DIM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 PDL: tl.constexpr):
    overlap.begin(PDL)
    pid = tl.program_id(0)
    m = pid % M
    offs_n = (pid // M) * BN + tl.arange(0, BN)
    n_ok = offs_n < N
    if EPI == 4:  # the gate's rows n and n + gate_off in turn: a program makes gated outputs n
        half = (pid // M) * (BN // 2) + tl.arange(0, BN // 2)
        offs_n = tl.reshape(tl.join(half, half + gate_off), [BN])
        n_ok = tl.reshape(tl.join(half, half), [BN]) < N
    x_row = X + m * sx_m
    dt = X.dtype.element_ty
    if not INT4:
        w_first = first_tile(W, offs_n, n_ok, sw_n, K, BK)
    overlap.wait(PDL)

    # A dense product normalizes an RMSNorm's row in its one pass (gemv_dots.dot_dense).
    mean, rstd = norm_stats(x_row, eps, K, NORM if INT4 or NORM != 1 else 0, BK)
    if INT4 and WORDS:
        y = dot_int4(x_row, W, WS, offs_n, n_ok, sw_n, ss_n, NW, NB, mean, rstd, gate_off,
                      K, GROUP, NORM, ACT, BN, BK)
    elif INT4:
        y = dot_int4_bytes(x_row, W, WS, offs_n, n_ok, sw_n, ss_n, NW, NB, mean, rstd, gate_off,
                           K, GROUP, NORM, ACT, BN, BK)
    else:
        y = dot_dense(x_row, w_first, W, offs_n, n_ok, sw_n, NW, NB, mean, rstd, eps, gate_off,
                      K, NORM, ACT, BN, BK)
    if INT8:  # each output row's scale, applied once to the fp32 sum (engine.ops.linear.matmul)
        y = y * (tl.load(WS + offs_n, mask=n_ok, other=0.0) / 127.0)
    y = y.to(dt).to(tl.float32)  # the product, rounded as torch's is

    if EPI == 0:
        tl.store(OUT + m * so_m + offs_n, y.to(dt), mask=n_ok)
    if EPI == 1:
        if HAS_SCALE:
            y = (tl.load(SCALE + offs_n, mask=n_ok, other=0.0).to(tl.float32) * y).to(dt).to(tl.float32)
        r = tl.load(RES + m * sr_m + offs_n, mask=n_ok, other=0.0).to(tl.float32)
        tl.store(OUT + m * so_m + offs_n, (r + y).to(dt), mask=n_ok)
    if EPI == 2:
        # Output feature n of the fused QKV projection: section n // d_model (q, k, v), head,
        # dimension. RoPE rotates interleaved (re, im) pairs of q and k in fp32.
        pos = tl.load(POS) + m
        section = offs_n // d_model
        head = (offs_n % d_model) // HEAD_DIM
        dim = offs_n % HEAD_DIM
        if HAS_ROPE:
            pair = tl.reshape(y, [BN // 2, 2])
            re, im = tl.split(pair)
            half = tl.reshape(dim, [BN // 2, 2])
            half, _ = tl.split(half)
            angle = tl.exp((half // 2).to(tl.float32) * rope_coef) * pos.to(tl.float32)
            c = tl.cos(angle)
            s = tl.sin(angle)
            rotated = tl.reshape(tl.join(re * c - im * s, re * s + im * c), [BN])
            y = tl.where(section < 2, rotated, y)
        y = y.to(dt)
        tl.store(OUT + m * sq_m + head * sq_h + dim, y, mask=n_ok & (section == 0))
        slot = pos % ring
        kv = KV + slot * skv_r + (section - 1) * skv_c + head * skv_h + dim * skv_d
        tl.store(kv, y, mask=n_ok & (section > 0))
    if EPI == 3:
        token = tl.load(TOK)
        row = tl.maximum(token, 0)
        e = tl.load(EMB + row * semb + offs_n, mask=n_ok, other=0.0).to(tl.float32)
        if EMB_INT8:  # an Int8Rows table: q * scale in fp32, rounded once as torch rounds it
            e = (e * tl.load(ESC + row)).to(dt).to(tl.float32)
        e = tl.where(token == -1, 0.0, e)  # the zero token contributes nothing
        tl.store(OUT + m * so_m + offs_n, (y + e).to(dt), mask=n_ok)
    if EPI == 4:  # silu(a) * b, each rounded as the torch formula rounds it (prologue_chunk's ACT 1)
        a, b = tl.split(tl.reshape(y, [BN // 2, 2]))
        a = (a / (1.0 + tl.exp(-a))).to(dt).to(tl.float32)
        half = (pid // M) * (BN // 2) + tl.arange(0, BN // 2)
        tl.store(OUT + m * so_m + half, (a * b).to(dt), mask=half < N)


@triton.jit
def _prologue_kernel(X, OUT, sx_m, so_m, NW, NB, eps, gate_off,
                     K: tl.constexpr, NORM: tl.constexpr, ACT: tl.constexpr, BK: tl.constexpr,
                     PDL: tl.constexpr):
    """The products' prologue alone, one program per row: for products with many programs,
    where computing it in each of them costs more than a launch."""
    overlap.enter(PDL)
    m = tl.program_id(0)
    x_row = X + m * sx_m
    dt = X.dtype.element_ty
    mean, rstd = norm_stats(x_row, eps, K, NORM, BK)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        k_ok = ks < K
        x = prologue_chunk(x_row, ks, k_ok, NW, NB, mean, rstd, gate_off, NORM, ACT)
        tl.store(OUT + m * so_m + ks, x.to(dt), mask=k_ok)


class _Config(NamedTuple):
    bn: int
    bk: int
    num_warps: int
    num_stages: int


def _config(N: int, K: int, dtype: torch.dtype, weights: str = "float") -> _Config:
    """Tile sizes: a function of the static shape only (the order of the fp32 sums depends
    on BK and on the reduction layout, so it must not depend on anything that changes
    between an eager and a replayed call). From tests/gpu/bench_linear.py's sweep on an H200
    (one row, graph-replayed, weights read from memory): two output features per program and
    wide K chunks keep the most loads in flight; each rule below is within 1-2% of the best
    configuration swept for the frame's shapes, and 9-40% faster than cuBLAS on them.

    Int8 weights (`bench_linear.py --int8`): a 4096-wide K chunk of int8 rows is the bytes in
    flight of a 2048-wide bf16 one; the temporal products then run 1.4-1.7x faster than
    cuBLAS on the same weights in bf16 (about 3 TB/s of int8 weights: each program also reads
    the whole input row). The depformer's small products want more rows per program.

    Int4 weights (`bench_linear.py --int4`): eight rows by up to 4096 inputs, four warps, is
    the best or within 3% of it for the temporal products and the depformer's qkv and FFN
    input (1.5-1.9x faster than cuBLAS on the same weights in bf16, 1.2-1.9 TB/s of int4
    weights: the unpacking's instructions, not memory, bound it).

    Float32 products up to 2048 deep (Mimi's transformers, two positions a step): four rows a
    program and four warps; in a replayed Mimi frame on an H200 (bench.mimi_frame) an encode's
    32 products took 98 µs so, against 154 µs at two rows and eight warps."""
    if weights == "int4":
        return _Config(8, max(GROUP_SIZE, min(4096, triton.next_power_of_2(K))), 4, 3)
    if weights == "int8":
        if K >= 4096:
            return _Config(2, min(4096, triton.next_power_of_2(K)), 8 if K > 8192 else 4, 3)
        return _Config(16, min(512, triton.next_power_of_2(K)), 8, 3)
    bk = min(2048, triton.next_power_of_2(K))
    if K > 8192:  # the temporal FFN's output product
        return _Config(4, bk, 4, 1)
    if dtype == torch.float32 and K <= 2048:  # Mimi's transformers (the docstring's last paragraph)
        return _Config(4, bk, 4, 3)
    if K >= 4096 or dtype == torch.float32:
        return _Config(2, bk, 8, 3)
    return _Config(2, bk, 4, 3)  # the depformer's small products


SEPARATE_PROLOGUE_BYTES = 16 << 20
"""Every program of a product with a prologue reads the whole input row (and the norm's
weights): where that adds up to more than this, a prologue that needs the row's statistics
first (a LayerNorm, an int4 product's RMSNorm) or an activation runs once, in a kernel of its
own, at the price of a launch. A dense product's RMSNorm never does (_separate_prologue)."""


NORM_ROWS = 4
"""Output rows at least per program of a dense product that takes an RMSNorm in its pass: each
program reads the input row and the norm's weights once for all its rows. tests/gpu/bench_layers.py
on an H200: the temporal transformer's 32 layers 3.85 ms at 4 rows against 3.99 at 2 and 4.24
at 8; the depformer's 8 steps 0.75 ms at 4 or 8 against 0.80 at 2."""


def _separate_prologue(N: int, k: int, cfg: _Config, x: torch.Tensor, norm: Norm | None, act: str | None,
                       int4: bool) -> bool:
    """A dense product takes an RMSNorm in its one pass (gemv_dots.dot_dense), at no cost
    beyond reading the norm's weights: it never runs apart."""
    if act is None and (norm is None or (norm.kind == "rms" and not int4)):
        return False
    return triton.cdiv(N, cfg.bn) * k * x.element_size() > SEPARATE_PROLOGUE_BYTES


def _prologue(x: torch.Tensor, k: int, norm: Norm | None, act: str | None) -> torch.Tensor:
    out = torch.empty(x.shape[0], k, dtype=x.dtype, device=x.device)
    nw, nb, eps = norm_args(norm, x)
    _prologue_kernel[(x.shape[0],)](x, out, x.stride(0), out.stride(0), nw, nb, eps, k, K=k,
                                    NORM=_NORM[None if norm is None else norm.kind], ACT=_ACT[act],
                                    BK=min(1024, triton.next_power_of_2(k)), num_warps=8, **overlap.launch(x.device))
    return out


def _launch(x, w, out, *, k: int, norm: Norm | None = None, act: str | None = None, epi: int = _EPI_STORE,
            residual=None, scale=None, qkv=None, embed=None):
    """One product; for epi _EPI_GATE, w's rows are the gate's two halves and out [M, N / 2]
    receives silu(first half) * second half."""
    ws, group, ss_n = x, 1, 0  # placeholders where the weights are not quantized
    if isinstance(w, Int8Weight):
        w, ws = w.q, w.scb
    int4 = isinstance(w, Int4Weight)
    words = int4 and not (w.q.shape[1] % 4 or w.q.stride(0) % 4 or w.q.storage_offset() % 4)
    if int4:  # rows of whole 32-bit words (every real model's) are read as words
        w, ws, group, ss_n = w.q.view(torch.int32) if words else w.q, w.scale, w.group, w.scale.stride(0)
    M, N = x.shape[0], w.shape[0]
    if M > MAX_ROWS or w.stride(1) != 1 or w.shape[1] * (8 if words else 2 if int4 else 1) != k:
        raise ValueError(f"fused linear: {M} rows of {k} against weight {tuple(w.shape)}")
    cfg = _config(N, k, x.dtype, "int4" if int4 else "int8" if w.dtype == torch.int8 else "float")
    if _separate_prologue(N, k, cfg, x, norm, act, int4):
        x = _prologue(x, k, norm, act)
        norm = act = None
    bn, gate_off = cfg.bn, k
    if norm is not None and norm.kind == "rms" and not int4:  # the norm in the pass: see NORM_ROWS
        bn = max(bn, NORM_ROWS)
    if epi == _EPI_GATE:  # a program's rows: half of them from each half of the weights
        N, gate_off = N // 2, N // 2
        bn = 2 * max(1, bn // 2)
    dummy = x
    nw, nb, eps = norm_args(norm, dummy)
    epilogue, flags = epilogue_args(dummy, N, residual, scale, qkv)
    tok, emb, esc, semb = (dummy, dummy, dummy, 0) if embed is None else (embed[0], *_table(embed[1]))
    grid = (triton.cdiv(N, bn // 2 if epi == _EPI_GATE else bn) * M,)
    _gemv_kernel[grid](
        x, w, ws, out, M, N, x.stride(0), w.stride(0), ss_n, out.stride(0),
        nw, nb, eps, gate_off,
        *epilogue,
        tok, emb, esc, semb,
        K=k, INT8=w.dtype == torch.int8, INT4=int4, WORDS=words, GROUP=group,
        NORM=_NORM[None if norm is None else norm.kind], ACT=_ACT[act], EPI=epi,
        EMB_INT8=embed is not None and isinstance(embed[1], Int8Rows), **flags, BN=bn, BK=cfg.bk,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **overlap.launch(x.device))
    return out


def linear(x: torch.Tensor, w: Weight, *, norm: Norm | None = None, act: str | None = None,
           residual: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (or [M, 2K] for act="silu_gate": the gate's two halves) @ w[N, K].T -> [M, N],
    with `norm` or `act` applied to x first and `residual` (+ scale * product) added after."""
    x, k, out = product_operands(x, w, act, residual, "fused linear")
    return _launch(x, w, out, k=k, norm=norm, act=act, epi=_EPI_STORE if residual is None else _EPI_RESIDUAL,
                   residual=residual, scale=scale)


def gated(x: torch.Tensor, w: Weight, norm: Norm | None = None) -> torch.Tensor:
    """A gated FFN's input side: [a | b] = norm(x) @ w.T (w [2H, K]), returned as silu(a) * b
    [M, H], a and b rounded as the product's output and each step after as the torch formula
    rounds it: the values `linear(h, ..., act="silu_gate")` would take from h, without h
    going through memory or a prologue of its own."""
    x = rows_input(x, "fused linear")
    if w.shape[0] % 2:
        raise ValueError(f"fused gate: weight {tuple(w.shape)} has an odd number of rows")
    out = torch.empty(x.shape[0], w.shape[0] // 2, dtype=x.dtype, device=x.device)
    return _launch(x, w, out, k=x.shape[1], norm=norm, epi=_EPI_GATE)


def _table(table: torch.Tensor | Int8Rows) -> tuple:
    """(rows, their scales or a placeholder, row stride) of an embedding table."""
    if isinstance(table, Int8Rows):
        return table.q, table.scale, table.q.stride(0)
    return table, table, table.stride(0)


def linear_embed(x: torch.Tensor, w: Weight, table: torch.Tensor | Int8Rows,
                 token: torch.Tensor) -> torch.Tensor:
    """x @ w.T plus the embedding row of `token` ([1] int64 on the device; -1: a zero row)."""
    x = rows_input(x, "fused linear")
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    return _launch(x, w, out, k=x.shape[1], epi=_EPI_EMBED, embed=(token, table))


def qkv_into_ring(x: torch.Tensor, w: Weight, norm: Norm | None, pos: torch.Tensor, kv: torch.Tensor,
                  heads: int, rope_coef: float | None) -> torch.Tensor:
    """The attention's input side in one kernel: q, k, v = norm(x) @ w.T split per head, RoPE
    on q and k at positions pos + row (pair i turning at frequency exp(i * rope_coef); None: no
    RoPE), k and v written into the ring `kv` [ring, 2, H, D] at slots (pos + row) % ring.
    Returns q as [1, H, M, D]."""
    x = rows_input(x, "fused linear")
    M, D = x.shape[0], kv.shape[-1]
    q = torch.empty(M, heads, D, dtype=x.dtype, device=x.device)
    if kv.shape[1:] != (2, heads, D) or w.shape[0] != 3 * heads * D:
        raise ValueError(f"fused qkv: weight {tuple(w.shape)} against ring {tuple(kv.shape)}")
    _launch(x, w, q, k=x.shape[1], norm=norm, epi=_EPI_QKV, qkv=(pos, kv, q, rope_coef, D))
    return q.permute(1, 0, 2).unsqueeze(0)
