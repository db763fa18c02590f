"""The LM's input embedding in one kernel: each input stream's row for its token, summed.

A Moshi frame's backbone input is the sum of 17 embedding rows (the audio streams', then the
text's), each the zero row for the zero token. In torch that is a lookup per stream and an
addition per stream after the first, about 35 kernels at batch 1; here one program per (row,
span of the width) reads each stream's row where its table is (the tables' addresses passed as
an array, since every stream has a table of its own) and adds them in the same order, each
sum rounded to the activations' dtype as torch's addition rounds it: the same bits. Int8 tables
(the int4 layout's Int8Rows) give q * scale in fp32, rounded once, as engine.ops.linear does.
A DiffuPlex wake's future positions take a stream's MASK embedding where the row does not know
the stream's token (`known`, `masks`), as the torch formula's `where` does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap
from .operands import Int8Rows


@triton.jit
def _row(TABLES, SCALES, TOK, s, d, d_ok, width, dt: tl.constexpr, INT8: tl.constexpr):
    """Stream s's embedding row for its token, in dt, as fp32."""
    token = tl.load(TOK + s)
    row = tl.maximum(token, 0).to(tl.int64)
    if INT8:
        table = tl.load(TABLES + s).to(tl.pointer_type(tl.int8))
        scale = tl.load(tl.load(SCALES + s).to(tl.pointer_type(tl.float32)) + row)
        e = (tl.load(table + row * width + d, mask=d_ok, other=0).to(tl.float32) * scale).to(dt)
    else:
        table = tl.load(TABLES + s).to(tl.pointer_type(dt))
        e = tl.load(table + row * width + d, mask=d_ok, other=0.0)
    return tl.where(token == -1, 0.0, e.to(tl.float32))


@triton.jit
def _known_row(TABLES, SCALES, tok, known, MASKS, s, d, d_ok, width, dt: tl.constexpr, INT8: tl.constexpr,
               MASKED: tl.constexpr):
    """_row, or (MASKED, where the row does not know stream s) the stream's mask row."""
    e = _row(TABLES, SCALES, tok, s, d, d_ok, width, dt, INT8)
    if MASKED:
        mask = tl.load(MASKS + s * width + d, mask=d_ok, other=0.0).to(tl.float32)
        e = tl.where(tl.load(known + s) != 0, e, mask)
    return e


@triton.jit
def _sum_kernel(TABLES, SCALES, TOKENS, KNOWN, MASKS, OUT, width, s_tok, s_known, s_out, S: tl.constexpr,
                INT8: tl.constexpr, MASKED: tl.constexpr, BD: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    r = tl.program_id(0)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    d_ok = d < width
    dt = OUT.dtype.element_ty
    tok = TOKENS + r * s_tok
    x = _known_row(TABLES, SCALES, tok, KNOWN + r * s_known, MASKS, 0, d, d_ok, width, dt, INT8, MASKED).to(dt)
    for s in tl.static_range(1, S):
        e = _known_row(TABLES, SCALES, tok, KNOWN + r * s_known, MASKS, s, d, d_ok, width, dt, INT8, MASKED)
        x = (x.to(tl.float32) + e).to(dt)
    tl.store(OUT + r * s_out + d, x, mask=d_ok)


_ADDRESSES: dict[tuple, torch.Tensor] = {}
"""The tables' addresses on the device, made once for each set of tables and kept for the
process's life (a few bytes a model): a captured graph reads them where they were when it was
captured, so they are never freed, and none is made during a capture."""


def _addresses(pointers: tuple[int, ...], device: torch.device) -> torch.Tensor:
    key = (pointers, device)
    if key not in _ADDRESSES:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("input embedding: tables first met during a graph capture (run it eagerly first)")
        _ADDRESSES[key] = torch.tensor(pointers, dtype=torch.int64, device=device)
    return _ADDRESSES[key]


def summed_rows(tables: list[torch.Tensor | Int8Rows], tokens: torch.Tensor, dtype: torch.dtype,
                known: torch.Tensor | None = None, masks: torch.Tensor | None = None) -> torch.Tensor:
    """tables[s]'s row for tokens[r, s] (-1: the zero row), summed over s in order: [R, d];
    with known [R, S] (bool) and masks [S, d] in dtype, masks[s] where known[r, s] is False."""
    int8 = isinstance(tables[0], Int8Rows)
    weights = [t.q if int8 else t for t in tables]
    width = weights[0].shape[1]
    if (any(isinstance(t, Int8Rows) != int8 for t in tables) or tokens.shape[1] != len(tables) or tokens.stride(1) != 1
            or any(w.shape[1] != width or w.stride() != (width, 1) for w in weights)
            or any(w.dtype != (torch.int8 if int8 else dtype) for w in weights)):
        raise ValueError(f"summed rows: {len(tables)} tables for tokens {tuple(tokens.shape)} in {dtype}")
    device = tokens.device
    addresses = _addresses(tuple(w.data_ptr() for w in weights), device)
    scales = _addresses(tuple(t.scale.data_ptr() for t in tables), device) if int8 else addresses
    if known is not None and (known.shape != tokens.shape or masks.shape != (len(tables), width)
                              or masks.dtype != dtype):
        raise ValueError(f"summed rows: known {tuple(known.shape)} and masks {tuple(masks.shape)} {masks.dtype} "
                         f"for tokens {tuple(tokens.shape)} of width {width} in {dtype}")
    known_bytes = tokens if known is None else known.to(torch.int8).contiguous()
    masks = tokens if masks is None else masks.contiguous()
    out = torch.empty(tokens.shape[0], width, dtype=dtype, device=device)
    bd = min(1024, triton.next_power_of_2(width))
    _sum_kernel[(tokens.shape[0], triton.cdiv(width, bd))](
        addresses, scales, tokens, known_bytes, masks, out, width, tokens.stride(0), known_bytes.stride(0),
        out.stride(0), S=len(tables), INT8=int8, MASKED=known is not None, BD=bd, num_warps=4,
        enable_fp_fusion=False, **overlap.launch(device))  # fp32 rows: q * scale rounded, then added
    return out
