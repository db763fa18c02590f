"""Products for a wake's rows (past fused_linear's MAX_ROWS, up to MAX_WAKE_ROWS, or fewer with a
LoRA), the layer's elementwise work and a DiffuPlex LoRA correction fused in. fused_linear reads a
weight tile again for each row; here one program per BN output features covers all rows, padded to
BM = 16 or 32, on the tensor cores (tl.dot, fp32 sums): each weight is read once per wake. Int8 and
int4 (read by byte: the dot wants [BN, 32] nibbles in input order) convert exactly, the scale on
the fp32 sum (a row's; a GROUP's); fp32 activations take the same code, input_precision="ieee".
`lead_kernel` does the per-row prologue (norm, gate, GELU) and the LoRA's t = x[-r:] @ A.T; a split
product with no prologue computes t itself (`_inline_lead`). The epilogues (store, residual, QKV
with RoPE into ring slots (pos + row) % ring) add t @ (scale * B).T first. Few output tiles split K:
the tile's last program sums the fp32 partials in order (split_sums: same bits whichever is last),
or, with `_inline_lead`, a second launch does. Rounding is the torch formulas' (`add_delta`'s) but
for the fp32 sums' order. Tiles and splits follow the static shape: eager or replayed, same bits.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton

from . import MAX_WAKE_ROWS, overlap, split_sums
from .operands import Int4Weight, Int8Weight, Norm, epilogue_args, norm_args, product_operands, rows_input
from .rows_kernels import lead_kernel, rows_kernel

Weight = torch.Tensor | Int8Weight | Int4Weight
Lora = tuple  # (a [rank, K], b [N, rank], scale: float, rows: int): the last `rows` rows corrected

_NORM = {None: 0, "rms": 1, "layer": 2}
_ACT = {None: 0, "silu_gate": 1, "gelu": 2}
_EPI_STORE, _EPI_RESIDUAL, _EPI_QKV = 0, 1, 2
_FEW_TILES = 256
"""Output tiles below which K is split until the grid has twice as many programs (about
four per multiprocessor of an H200, 132). From the tile sweep (tests/gpu/bench_rows_linear.py
--sweep, a wake of 9 rows with its LoRA): the 128 tiles of a 4096-output product run
1.1-1.4x faster split in four; 352-384 tiles run slower split (the partials' second launch)."""


_UPCAST = os.environ.get("TRITON_INTERPRET") == "1"
"""Whether tl.dot's operands are widened to fp32 first: only under Triton's interpreter, whose
dot multiplies a bf16 tensor's raw 16-bit patterns as integers (triton 3.9,
interpreter.create_dot). The values are the same: a product of two bf16 numbers is exact in
fp32, as on the tensor cores."""


INLINE_LEAD = True
"""Whether a product that may (`_inline_lead`) projects its LoRA rows down itself; False gives
them a lead kernel and lets them finish in one launch (a knob for the benchmarks)."""


class _Config(NamedTuple):
    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    split: int = 1
    """K is cut into this many spans, each summed by its own programs (rows_kernels)."""


def _span(k: int, split: int, bk: int) -> int:
    """Inputs per split: whole iterations of `bk`."""
    return triton.cdiv(triton.cdiv(k, split), bk) * bk


def _config(M: int, N: int, K: int, dtype: torch.dtype, group: int | None = None) -> _Config:
    """Tile sizes from the static shape only (the order of the fp32 sums depends on them),
    the sweep's best for the temporal transformer's products: 64 outputs a tile where that
    still gives _FEW_TILES tiles, else 32; 128 inputs an iteration; K split below _FEW_TILES
    tiles, each split keeping at least four iterations. Int4 (`group`: its inputs per scale)
    takes four groups an iteration."""
    bn = 64 if triton.cdiv(N, 64) >= _FEW_TILES else 32
    if group is not None:
        bk = group * min(4, triton.cdiv(K, group))
    else:
        bk = min(64 if dtype == torch.float32 else 128, max(16, triton.next_power_of_2(K)))
    tiles, split = triton.cdiv(N, bn), 1
    while tiles < _FEW_TILES and tiles * split < 2 * _FEW_TILES and 8 * split * bk <= K:
        split *= 2
    return _Config(16 if M <= 16 else 32, bn, bk, 4, 3, split)


def _plain(device: torch.device) -> dict:
    """Launch options: these kernels launch plainly, not overlapped. On an H200 a DiffuPlex
    wake's backbone took 6.03 ms with them overlapped, 5.03 ms without (bench --diffuplex);
    with only the lead kernels overlapped, 4.84 ms against 4.79."""
    return overlap.launch(device, overlapped=False)


def _lead(x: torch.Tensor, k: int, norm: Norm | None, act: str | None, lora: Lora | None):
    """(the product's input rows, the LoRA's fp32 partial products [splits, rows, rank] or
    None) in one launch, or x itself when there is neither a prologue nor a LoRA."""
    pro = norm is not None or act is not None
    if not pro and lora is None:
        return x, None
    M = x.shape[0]
    out = torch.empty(M, k, dtype=x.dtype, device=x.device) if pro else x
    a, rank, first, rows = x, 1, M, 1
    if lora is not None:
        a, b, _, rows = lora
        rank, first = a.shape[0], M - rows
    bk = min(512, triton.next_power_of_2(k))
    split = max(1, min(8, k // (2 * bk)))  # each row's K in spans: one program per row is latency bound
    t = torch.empty(split, rows, rank, dtype=torch.float32, device=x.device) if lora is not None else x[None]
    row0 = 0 if pro else first
    nw, nb, eps = norm_args(norm, x)
    lead_kernel[(M - row0, split)](x, out, a, t, x.stride(0), out.stride(0), a.stride(0), t.stride(0), t.stride(1),
                                   nw, nb, eps, k, row0, first, K=k, NORM=_NORM[None if norm is None else norm.kind],
                                   ACT=_ACT[act], PRO=pro, LORA=lora is not None, RANK=rank,
                                   RP=max(16, triton.next_power_of_2(rank)), BK=bk, KSPAN=_span(k, split, bk),
                                   num_warps=8, **_plain(x.device))  # the [RP, BK] fp32 sum in registers
    return out, (t if lora is not None else None)


def _inline_lead(x: torch.Tensor, w: torch.Tensor, cfg: _Config, pro: bool, lora: Lora | None) -> bool:
    """Whether the product projects its LoRA rows down itself, with no lead launch: K split (the
    second launch sums the down-projection before any epilogue needs it), no prologue, float
    weights of the LoRA's dtype (its A is read as one more tile of them) and a rank within a
    tile. A wake's attention output, on an H200 (bench.lm_steps --wake, 9 rows, rank 16): lead
    2.3 + product 10.6 + sums 5.2 us a layer, against 11.1 + 4.1 inline. An FFN activation
    applied as the product loads its input took 93 us against the lead's 4.4 + 24.1: the
    second product keeps its lead. With the sums in the product's own launch (split_sums), a
    lead for the attention output instead made the wake 4.42 ms against 4.38 (INLINE_LEAD)."""
    return (INLINE_LEAD and lora is not None and cfg.split > 1 and not pro and w.dtype == lora[0].dtype == x.dtype
            and lora[0].shape[0] <= cfg.bn)


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
    if lora is not None and (lora[0].shape[1] != k or lora[0].stride(1) != 1 or not 0 < lora[3] <= M):
        raise ValueError(f"rows linear: LoRA A {tuple(lora[0].shape)} for {M} rows of {k} ({lora[3]} corrected)")
    cfg = _config(M, N, k, x.dtype, group if int4 else None)
    inline = _inline_lead(x, w, cfg, norm is not None or act is not None, lora)
    if inline:  # PHASE 0's extra column of programs computes t
        t = torch.empty(cfg.split, lora[3], lora[0].shape[0], dtype=torch.float32, device=x.device)
    else:
        x, t = _lead(x, k, norm, act, lora)
    dummy = x
    epilogue, flags = epilogue_args(dummy, N, residual, scale, qkv)
    la, lb, lscale, slb_n, first, rank = dummy, dummy, 1.0, 0, M, 1
    if lora is not None:
        la, lb, lscale, rows = lora
        rank, first, slb_n = lb.shape[1], M - rows, lb.stride(0)
        if lb.shape[0] != N or lb.stride(1) != 1 or t.shape[2] != rank:
            raise ValueError(f"rows linear: LoRA B {tuple(lb.shape)} for {N} outputs of rank {t.shape[2]}")
    work = torch.empty(cfg.split, M, N, dtype=torch.float32, device=x.device) if cfg.split > 1 else dummy
    tiles = triton.cdiv(N, cfg.bn)
    args = (x, w, ws, out, M, N, x.stride(0), w.stride(0), ss_n, out.stride(0),
            *epilogue,
            dummy if t is None else t, la, lb, float(lscale), *((0, 0) if t is None else t.stride()[:2]),
            la.stride(0), slb_n, first, work, work.stride(0) if cfg.split > 1 else 0,
            split_sums.counters(x.device, tiles) if cfg.split > 1 and not inline else dummy)
    meta = dict(K=k, INT8=w.dtype == torch.int8, INT4=int4, GROUP=group, LORA_TILE=inline, EPI=epi, **flags,
                LORA=lora is not None, LSCALE=lscale != 1.0, RANK=rank,
                RP=max(16, triton.next_power_of_2(rank)), LSPLIT=1 if t is None else t.shape[0],
                PREC="ieee" if x.dtype == torch.float32 or _UPCAST else "tf32", UPCAST=_UPCAST,
                BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, SPLIT=cfg.split, KSPAN=_span(k, cfg.split, cfg.bk),
                num_warps=cfg.num_warps, num_stages=cfg.num_stages, **_plain(x.device))
    rows_kernel[(tiles + inline, cfg.split)](*args, PHASE=0, **meta)
    if cfg.split > 1 and inline:
        rows_kernel[(tiles,)](*args, PHASE=1, **meta)
    return out


def linear(x: torch.Tensor, w: Weight, *, norm: Norm | None = None, act: str | None = None,
           residual: torch.Tensor | None = None, scale: torch.Tensor | None = None,
           lora: Lora | None = None) -> torch.Tensor:
    """x [M, K] (or [M, 2K] for act="silu_gate") @ w[N, K].T -> [M, N]: `norm` or `act`
    applied to x first, the LoRA's rows corrected, `residual` (+ scale * product) added after."""
    x, k, out = product_operands(x, w, act, residual, "rows linear")
    return _launch(x, w, out, k=k, norm=norm, act=act, epi=_EPI_STORE if residual is None else _EPI_RESIDUAL,
                   residual=residual, scale=scale, lora=lora)


def qkv_into_ring(x: torch.Tensor, w: Weight, norm: Norm | None, pos: torch.Tensor, kv: torch.Tensor,
                  heads: int, rope_coef: float | None, lora: Lora | None = None) -> torch.Tensor:
    """fused_linear.qkv_into_ring for a wake's rows, the LoRA's rows corrected before RoPE:
    q as [1, H, M, D], k and v written into the ring kv [ring, 2, H, D] at (pos + row) % ring."""
    x = rows_input(x, "rows linear")
    M, D = x.shape[0], kv.shape[-1]
    q = torch.empty(M, heads, D, dtype=x.dtype, device=x.device)
    if kv.shape[1:] != (2, heads, D) or w.shape[0] != 3 * heads * D:
        raise ValueError(f"rows qkv: weight {tuple(w.shape)} against ring {tuple(kv.shape)}")
    _launch(x, w, q, k=x.shape[1], norm=norm, epi=_EPI_QKV, qkv=(pos, kv, q, rope_coef, D), lora=lora)
    return q.permute(1, 0, 2).unsqueeze(0)
