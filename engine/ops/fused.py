"""The fused transformer layer: when a step runs as fused layers, and the products it runs as
(engine.kernels.fused_linear: matrix-vector products with the layer's elementwise work fused
in). These products exist on the Triton path only: call them when `fuses` said so.
"""
from __future__ import annotations

import torch

from ..kernels import MAX_ROWS, TRITON_MAX_T
from ..kernels.operands import Norm
from . import dispatch
from .linear import Weight


def fuses(x: torch.Tensor, head_dim: int, *, streaming: bool, adapted: bool) -> bool:
    """Whether a step over x [1, T, d] runs as fused layers: streaming, no adapter, on CUDA with
    the Triton kernels, T within the products' and the ring attention's kernel limits, and
    an even head_dim (the QKV epilogue rotates pairs). Static facts only: toggles never
    change it."""
    return (streaming and not adapted and x.shape[1] <= min(MAX_ROWS, TRITON_MAX_T)
            and head_dim % 2 == 0 and dispatch.use_triton(x))


def linear(x: torch.Tensor, w: Weight, *, norm: Norm | None = None, act: str | None = None,
           residual: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (act "silu_gate": [M, 2K]) @ w.T -> [M, N], `norm` or `act` ("silu_gate",
    "gelu") applied to x first, `residual` (+ scale * product) added after."""
    from ..kernels.fused_linear import linear as fused

    return fused(x, w, norm=norm, act=act, residual=residual, scale=scale)


def qkv_into_ring(x: torch.Tensor, w: Weight, norm: Norm | None, pos: torch.Tensor, kv: torch.Tensor,
                  heads: int, rope_coef: float | None) -> torch.Tensor:
    """q, k, v = norm(x) @ w.T with RoPE (rope_coef: engine.ops.rope.coefficient; None: none),
    k and v written into the ring kv [ring, 2, H, D] at slots (pos + row) % ring: q [1, H, M, D]."""
    from ..kernels.fused_linear import qkv_into_ring as fused

    return fused(x, w, norm, pos, kv, heads, rope_coef)
