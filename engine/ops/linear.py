"""Products of activations with linear weights, bf16/fp32 tensors, int8 (an Int8Weight in
the q8 layout, engine.weights.int8) or int4 (an Int4Weight, engine.weights.int4): torch's product, or for a
few rows on CUDA the fused kernels (engine.kernels.fused_linear for one row, rows_linear for more).
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from ..kernels import MAX_WAKE_ROWS
from ..kernels.operands import LEVELS, Int4Weight, Int8Rows, Int8Weight
from . import dispatch

__all__ = ["LEVELS", "ZERO_TOKEN", "Int4Weight", "Int8Rows", "Int8Weight", "Table", "Weight", "chained_sum",
           "dequantized", "embedding", "embedding_rows", "linear", "linear_embed", "matmul", "stacked",
           "summed_embeddings"]
Weight = torch.Tensor | Int8Weight | Int4Weight
Table = torch.Tensor | Int8Rows
ZERO_TOKEN = -1
"""A token that contributes a zero embedding (the reference's `zero_token_id`; the fused
kernel's embedding epilogue reads -1 alike)."""


def matmul(x: torch.Tensor, w: Weight) -> torch.Tensor:
    """x [..., K] @ w.T on torch's kernels, always. Int8: accumulated in fp32 and scaled per
    output row before the one rounding to x's dtype, as the fused kernel does; int4: each
    weight dequantized in fp32, accumulated in fp32, rounded once."""
    if isinstance(w, Int8Weight):
        return (F.linear(x.float(), w.q.float()) * (w.scb / LEVELS)).to(x.dtype)
    if isinstance(w, Int4Weight):
        return F.linear(x.float(), dequantized(w)).to(x.dtype)
    return F.linear(x, w)


def dequantized(w: Int4Weight) -> torch.Tensor:
    """The fp32 weights [N, K] the int4 kernel multiplies: each nibble minus 8 times its group's
    scale, exact in fp32 (so is each product with a bf16 activation: the kernel and torch's
    product differ only in the order of the fp32 sums)."""
    q = torch.stack(((w.q & 15).float(), (w.q >> 4).float()), dim=-1).flatten(-2) - 8.0
    return q * w.scale.float().repeat_interleave(w.group, dim=1)[:, :q.shape[1]]


def linear(x: torch.Tensor, w: Weight) -> torch.Tensor:
    """x [..., K] @ w.T: on CUDA one row through the fused matrix-vector kernel, up to
    MAX_WAKE_ROWS rows through the rows kernel (each weight read once for all of them: a
    DiffuPlex wake's text head over its 5 rows took 197 µs as five rows of matrix-vector
    programs against 56 µs for one row, H200, bench.lm_steps --wake 4); otherwise `matmul`."""
    rows = x.numel() // x.shape[-1]
    if rows > MAX_WAKE_ROWS or not dispatch.use_triton(x):
        return matmul(x, w)
    flat = x.reshape(rows, -1)
    if flat.stride(1) != 1:  # a transposed view: the kernels read rows of unit stride
        flat = flat.contiguous()
    if rows > 1:
        from ..kernels.rows_linear import linear as rows_linear

        return rows_linear(flat, w).view(*x.shape[:-1], -1)
    from ..kernels.fused_linear import linear as fused_linear

    return fused_linear(flat, w).view(*x.shape[:-1], -1)


def stacked(weights: list[Weight]) -> tuple[Weight, list[Weight]]:
    """One weight holding the rows of `weights` (one format, one input width) in order, and each of them
    as a view of its rows: products of one input then read their weights in one launch."""
    if isinstance(weights[0], Int8Weight):
        whole = Int8Weight(torch.cat([w.q for w in weights]), torch.cat([w.scb for w in weights]))
    elif isinstance(weights[0], Int4Weight):
        whole = Int4Weight(torch.cat([w.q for w in weights]), torch.cat([w.scale for w in weights]), weights[0].group)
    else:
        whole = torch.cat(weights)
    views, first = [], 0
    for w in weights:
        rows = w.shape[0]
        views.append(whole[first:first + rows] if isinstance(whole, torch.Tensor)
                     else type(whole)(*(t[first:first + rows] for t in whole[:2]), *whole[2:]))
        first += rows
    return whole, views


def embedding(table: Table, tokens: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Rows of table [V, d] for tokens [...]: the zero row for ZERO_TOKEN. An Int8Rows table's
    rows are q * scale in fp32, rounded once to `dtype` (the activations'; None: left in fp32)."""
    rows = tokens.clamp(min=0)
    if isinstance(table, Int8Rows):
        y = (table.q[rows] * table.scale[rows].unsqueeze(-1)).to(dtype)  # promoted to fp32: q exactly
    else:
        y = F.embedding(rows, table)
    return torch.where((tokens == ZERO_TOKEN).unsqueeze(-1), torch.zeros((), dtype=y.dtype, device=y.device), y)


def embedding_rows(tables: list[Table], tokens: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """tables[s]'s rows for tokens[:, s] (tokens [R, S]): [S, R, d], each row as `embedding`
    gives it in `dtype` (float tables must be in it). A model's input streams at batch 1 are
    many small lookups: the zero rows and the index clamp are done once for all of them, and
    each float table is one kernel writing its place (19 kernels for 17 streams, not 68)."""
    safe = tokens.clamp(min=0)
    width = (tables[0].q if isinstance(tables[0], Int8Rows) else tables[0]).shape[-1]
    out = torch.empty(len(tables), tokens.shape[0], width, dtype=dtype, device=tokens.device)
    for s, table in enumerate(tables):
        if isinstance(table, Int8Rows):
            out[s] = table.q[safe[:, s]] * table.scale[safe[:, s]].unsqueeze(-1)  # fp32, rounded once to dtype
        elif table.dtype != dtype:
            raise ValueError(f"a {table.dtype} table for {dtype} rows")
        else:
            torch.index_select(table, 0, safe[:, s], out=out[s])
    return out.masked_fill_((tokens == ZERO_TOKEN).T.unsqueeze(-1), 0)


def chained_sum(rows: torch.Tensor) -> torch.Tensor:
    """rows [S, R, d] -> [1, R, d]: added one after another, each sum rounded as the
    reference's chain of additions rounds it."""
    x = rows[0]
    for row in rows[1:]:
        x = x + row
    return x.unsqueeze(0)


def summed_embeddings(tables: list[Table], tokens: torch.Tensor, dtype: torch.dtype,
                      known: torch.Tensor | None = None, masks: torch.Tensor | None = None) -> torch.Tensor:
    """chained_sum(embedding_rows(tables, tokens, dtype)): [1, R, d]; with known [R, S] (bool)
    and masks [S, d], masks[s] in place of stream s's row where a row does not know it. On CUDA
    one kernel (engine.kernels.stream_embeddings) for tables all float or all Int8Rows, the
    same bits, unless autograd needs the result (training the masks)."""
    trained = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (*tables, masks))
    if dispatch.use_triton(tokens) and len({isinstance(t, Int8Rows) for t in tables}) == 1 and not trained:
        from ..kernels.stream_embeddings import summed_rows

        return summed_rows(tables, tokens.contiguous(), dtype, known, masks).unsqueeze(0)
    rows = embedding_rows(tables, tokens, dtype)
    return chained_sum(rows if known is None else torch.where(known.T.unsqueeze(-1), rows, masks.unsqueeze(1)))


def linear_embed(x: torch.Tensor, w: Weight, table: Table, token: torch.Tensor) -> torch.Tensor:
    """x [1, 1, K] @ w.T plus the embedding row of `token` ([1] int64 on the device), [1, 1, N]:
    on CUDA one kernel (the row added in the product's epilogue)."""
    if dispatch.use_triton(x):
        from ..kernels.fused_linear import linear_embed as fused

        return fused(x.view(1, -1), w, table, token).view(1, 1, -1)
    return linear(x, w) + embedding(table, token, x.dtype).view(1, 1, -1)
