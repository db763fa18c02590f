"""Attention over a ring KV cache, reading only the entries that hold live keys (and over a linear
cache for grouped query heads: grouped_attention). The ring's semantics are the reference runtime's
(moshi 0.2.13 RingKVCache plus the mask of its StreamingMultiheadAttention): the step's T new entries
are already written, at slots (pos + t) % ring, and the query at p = pos + t attends to every key p'
still in the ring with 0 <= p - p' < context, a contiguous run ending at p. One function serves the
eager and the graph-replayed paths, so CUDA graphs on or off never change a bit; the valid length comes
from `pos`, a device tensor, never the host: one captured graph serves every frame, and nothing syncs.
CUDA, T <= `TRITON_MAX_T`: a Triton split-K kernel (engine/kernels/ring_attention_triton.py) visits
exactly the keys any query can see. Otherwise `torch_ring_attention`: torch ops over the whole ring at
a fixed shape, each slot holding no live key redirected to slot 0 (always written once anything is) and
masked out, so no unbacked entry of a demand-sized ring is ever read.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from ..kernels import TRITON_MAX_T
from . import dispatch

__all__ = ["TRITON_MAX_T", "grouped_attention", "ring_attention", "torch_grouped_attention", "torch_ring_attention"]


def ring_attention(q: torch.Tensor, kv_ring: torch.Tensor, pos: torch.Tensor, T: int,
                   context: int | None) -> torch.Tensor:
    """q [1, H, T, D]; kv_ring [ring, 2, H, D] (any strides, e.g. one layer of a
    [ring, L, 2, H, D] region); pos int64 [1] on q's device: position of the first query.
    context None: no window beyond the ring itself. Returns [1, H, T, D] in q's dtype."""
    ring, two, H, D = kv_ring.shape
    if q.shape != (1, H, T, D) or two != 2 or ring < T:
        raise ValueError(f"ring_attention: q {tuple(q.shape)} does not fit kv_ring {tuple(kv_ring.shape)}, T={T}")
    if T <= TRITON_MAX_T and dispatch.use_triton(q):
        from ..kernels.ring_attention_triton import triton_ring_attention

        return triton_ring_attention(q, kv_ring, pos, T, context)
    return torch_ring_attention(q, kv_ring, pos, T, context)


def torch_ring_attention(q, kv_ring, pos, T: int, context: int | None) -> torch.Tensor:
    """ring_attention's torch formula, on any device."""
    ring = kv_ring.shape[0]
    age = torch.arange(ring, device=q.device)
    pos_k = pos + (T - 1) - age  # age 0 is the newest entry
    pos_q = pos + torch.arange(T, device=q.device)
    delta = pos_q.view(-1, 1) - pos_k.view(1, -1)
    allowed = (pos_k >= 0) & (delta >= 0)
    if context is not None:
        allowed = allowed & (delta < context)
    slots = torch.where(pos_k >= 0, pos_k % ring, torch.zeros_like(pos_k))
    kv = kv_ring.index_select(0, slots)  # [ring, 2, H, D], live keys only
    keys = kv[:, 0].transpose(0, 1).unsqueeze(0).to(q.dtype)
    values = kv[:, 1].transpose(0, 1).unsqueeze(0).to(q.dtype)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed)


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, pos: torch.Tensor, T: int,
                      span: int, window: int | None) -> torch.Tensor:
    """Attention of grouped query heads over a linear cache. q [KV, rep * T, D]: a KV head's query heads
    for positions pos.. pos + T - 1 as its rows (row j * T + t: head j at pos + t); keys, values [KV,
    capacity, D] (any strides) with the pass's entries written; pos int64 [1] on q's device. Row r sees
    the entries at or before its position and, with a window, less than `window` behind it; `span`, a
    static bound on pos + T, sizes the work. Returns [KV, rep * T, D] in q's dtype. CUDA, heads of 16
    dimensions or more: the split-K kernel (engine/kernels/grouped_attention.py); otherwise
    torch_grouped_attention."""
    if keys.shape[0] != q.shape[0] or q.shape[1] % T or span > keys.shape[1]:
        raise ValueError(f"grouped_attention: q {tuple(q.shape)} does not fit keys {tuple(keys.shape)}, T={T}, "
                         f"span={span}")
    if dispatch.use_triton(q) and q.shape[-1] >= 16:  # tl.dot multiplies at least 16 deep (small test models)
        from ..kernels.grouped_attention import triton_grouped_attention

        return triton_grouped_attention(q, keys, values, pos, T, span, window)
    return torch_grouped_attention(q, keys, values, pos, T, span, window)


def hidden_keys(keys: torch.Tensor, rows: torch.Tensor, window: int | None) -> torch.Tensor:
    """[rows, keys] True where a row at position `rows[r]` does not see the key at `keys[k]`: one past
    its own position, or (with a window) `window` or more behind it."""
    hidden = keys[None, :] > rows[:, None]
    if window is not None:
        hidden = hidden | (keys[None, :] <= rows[:, None] - window)
    return hidden


def torch_grouped_attention(q, keys, values, pos, T: int, span: int, window: int | None) -> torch.Tensor:
    """grouped_attention's torch formula (SDPA under a mask over the first `span` entries), on any device."""
    rows = pos + torch.arange(T, device=q.device).repeat(q.shape[1] // T)
    seen = ~hidden_keys(torch.arange(span, device=q.device), rows, window)
    return F.scaled_dot_product_attention(q[None], keys[:, :span][None], values[:, :span][None],
                                          attn_mask=seen[None, None], scale=q.shape[-1] ** -0.5)[0]
