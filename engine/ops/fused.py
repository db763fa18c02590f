"""The fused transformer layer: when a step runs as fused layers, and the products it runs as
(engine.kernels.fused_linear: matrix-vector products with the layer's elementwise work fused
in, for up to MAX_ROWS rows; engine.kernels.rows_linear: one tile of outputs over all rows on
the tensor cores, for a wake's rows and for any product with a LoRA correction). Which one
follows from the static shape alone. These products exist on the Triton path only: call them
when `fuses` said so.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..kernels import MAX_ROWS, MAX_WAKE_ROWS, TRITON_MAX_T
from ..kernels.operands import Norm
from . import dispatch
from .linear import Weight


class Lora(NamedTuple):
    """A low-rank correction of a product's last `rows` rows: out[-rows:] += (x[-rows:] @ a.T) @
    (scale * b).T, rounded as engine.families.diffuplex.predictor's add_delta rounds."""
    a: torch.Tensor  # [rank, K]
    b: torch.Tensor  # [N, rank]
    scale: float
    rows: int


def fuses(x: torch.Tensor, head_dim: int, *, streaming: bool) -> bool:
    """Whether a step over x [1, T, d] runs as fused layers: streaming, on CUDA with the Triton
    kernels, T within the products' and the ring attention's kernel limits, and an even
    head_dim (the QKV epilogue rotates pairs). An adapter's LoRA is fused too. Static facts
    only: toggles never change it."""
    return (streaming and x.shape[1] <= min(MAX_WAKE_ROWS, TRITON_MAX_T)
            and head_dim % 2 == 0 and dispatch.use_triton(x))


def _many_rows(x: torch.Tensor, lora: Lora | None) -> bool:
    """rows_linear's products, else fused_linear's: from the shape and the LoRA's presence."""
    return x.shape[0] > MAX_ROWS or lora is not None


def linear(x: torch.Tensor, w: Weight, *, norm: Norm | None = None, act: str | None = None,
           residual: torch.Tensor | None = None, scale: torch.Tensor | None = None,
           lora: Lora | None = None) -> torch.Tensor:
    """x [M, K] (act "silu_gate": [M, 2K]) @ w.T -> [M, N], `norm` or `act` ("silu_gate",
    "gelu") applied to x first, `lora`'s rows corrected, `residual` (+ scale * product) added after."""
    if _many_rows(x, lora):
        from ..kernels.rows_linear import linear as rows

        return rows(x, w, norm=norm, act=act, residual=residual, scale=scale, lora=lora)
    from ..kernels.fused_linear import linear as fused

    return fused(x, w, norm=norm, act=act, residual=residual, scale=scale)


def gated_ffn(x: torch.Tensor, w_in: Weight, w_out: Weight, *, norm: Norm | None, residual: torch.Tensor,
              scale: torch.Tensor | None = None, lora_in: Lora | None = None,
              lora_out: Lora | None = None) -> torch.Tensor:
    """residual + scale * (silu(a) * b) @ w_out.T, where [a | b] = norm(x) @ w_in.T, `lora_in` and
    `lora_out` correcting the two products' rows. With few rows and no correction the gate is
    the first product's epilogue (fused_linear.gated): two launches, the hidden row written
    once at half its width."""
    if _many_rows(x, lora_in) or lora_out is not None:
        h = linear(x, w_in, norm=norm, lora=lora_in)
        return linear(h, w_out, act="silu_gate", residual=residual, scale=scale, lora=lora_out)
    from ..kernels.fused_linear import gated
    from ..kernels.fused_linear import linear as fused

    return fused(gated(x, w_in, norm), w_out, residual=residual, scale=scale)


def qkv_into_ring(x: torch.Tensor, w: Weight, norm: Norm | None, pos: torch.Tensor, kv: torch.Tensor,
                  heads: int, rope_coef: float | None, lora: Lora | None = None) -> torch.Tensor:
    """q, k, v = norm(x) @ w.T (`lora`'s rows corrected) with RoPE (rope_coef:
    engine.ops.rope.coefficient; None: none), k and v written into the ring kv [ring, 2, H, D]
    at slots (pos + row) % ring: q [1, H, M, D]."""
    if _many_rows(x, lora):
        from ..kernels.rows_linear import qkv_into_ring as rows

        return rows(x, w, norm, pos, kv, heads, rope_coef, lora)
    from ..kernels.fused_linear import qkv_into_ring as fused

    return fused(x, w, norm, pos, kv, heads, rope_coef)


def heads_into_cache(qkv: torch.Tensor, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
                     cos: torch.Tensor, sin: torch.Tensor, position: torch.Tensor, keys: torch.Tensor,
                     values: torch.Tensor, heads: int) -> torch.Tensor:
    """A grouped-query layer's heads after its QKV product (engine.kernels.head_norm_rope): q and k
    RMS-normalised per head (None: not at all) and rotated (half-split RoPE, tables by position), k and v
    written into the layer's cache [KV, capacity, D] at rows position[0] + m: the queries [KV, rep * M, D]."""
    from ..kernels.head_norm_rope import heads_into_cache as kernel

    return kernel(qkv, q_norm, k_norm, eps, cos, sin, position, keys, values, heads)
