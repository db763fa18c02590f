"""Rotary position embeddings: the frequency tables, and the rotation of interleaved (re, im)
pairs as torch ops or one kernel (engine.kernels.norm_rope)."""
from __future__ import annotations

import math

import torch

from . import dispatch


def coefficient(head_dim: int, max_period: float) -> float:
    """freq_i = exp(i * coefficient) for pair i of a head (the fused QKV kernel takes it)."""
    return -math.log(max_period) * 2 / head_dim


def tables(each: torch.Tensor, head_dim: int, max_period: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, 1, T, D/2] in fp32 for the positions each [T]."""
    half = head_dim // 2
    freqs = torch.exp(torch.arange(half, device=each.device, dtype=torch.float32)
                      * coefficient(head_dim, max_period))
    angle = freqs * each.float().view(1, 1, -1, 1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate interleaved (re, im) pairs of x [B, H, T, D] by their positions' tables, in fp32.
    The kernel takes a power-of-two D."""
    cos, sin = rope
    if dispatch.use_triton(x) and _is_power_of_two(x.shape[-1]):
        from ..kernels.norm_rope import rope as fused

        return fused(x, cos, sin)
    xr, xi = x.view(*x.shape[:-1], -1, 2).float().unbind(-1)
    out = torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1)
    return out.to(x.dtype).view(x.shape)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
