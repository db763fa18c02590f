"""Norms: the fp32 RMSNorm as torch ops or one kernel (engine.kernels.norm_rope), and the
norm description the fused products take."""
from __future__ import annotations

import torch

from ..kernels.operands import Norm
from . import dispatch

__all__ = ["Norm", "rms_norm"]


def rms_norm(x: torch.Tensor, alpha: torch.Tensor, eps: float) -> torch.Tensor:
    """x [B, T, dim] * alpha [1, 1, dim] / rms(x), computed in fp32, in x's dtype."""
    if dispatch.use_triton(x):
        from ..kernels.norm_rope import rms_norm as fused

        return fused(x, alpha, eps)
    xf = x.float()
    var = eps + torch.mean(xf * xf, dim=2, keepdim=True)
    return (xf * (alpha.float() * torch.rsqrt(var))).to(x.dtype)
