"""Fused CUDA kernels for the per-layer elementwise work of a batch-1 step.

At batch 1 a transformer layer's time is mostly kernel launches, not arithmetic: the fp32
RMSNorm is eight small kernels in torch and the interleaved RoPE about ten for each of q
and k. Each is one kernel here. They run on CUDA whatever the toggles say (toggles never
change which kernels compute), and compute in fp32 as the torch versions do; results can
differ from the CPU path in the last bits, as any two kernels can.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap


@triton.jit
def _rms_norm_kernel(x_ptr, alpha_ptr, out_ptr, dim, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(x_ptr + row * dim + cols, mask=mask, other=0.0).to(tl.float32)
    alpha = tl.load(alpha_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    var = eps + tl.sum(x * x, axis=0) / dim
    y = x * (alpha * tl.math.rsqrt(var))
    tl.store(out_ptr + row * dim + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, alpha: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., dim] (contiguous) -> same shape and dtype; normalised in fp32."""
    x = x.contiguous()
    dim = x.shape[-1]
    out = torch.empty_like(x)
    _rms_norm_kernel[(x.numel() // dim,)](x, alpha, out, dim, eps, BLOCK=triton.next_power_of_2(dim),
                                        **overlap.launch(x.device))
    return out


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, T, H, s_h, s_t, HALF: tl.constexpr, PDL: tl.constexpr):
    overlap.enter(PDL)
    pid = tl.program_id(0)  # one program per (head, step)
    h, t = pid // T, pid % T
    i = tl.arange(0, HALF)
    base = x_ptr + h * s_h + t * s_t
    xr = tl.load(base + 2 * i).to(tl.float32)
    xi = tl.load(base + 2 * i + 1).to(tl.float32)
    c = tl.load(cos_ptr + t * HALF + i)
    s = tl.load(sin_ptr + t * HALF + i)
    out = out_ptr + (h * T + t) * 2 * HALF
    tl.store(out + 2 * i, (xr * c - xi * s).to(out_ptr.dtype.element_ty))
    tl.store(out + 2 * i + 1, (xr * s + xi * c).to(out_ptr.dtype.element_ty))


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [1, H, T, D] (any strides over H and T, unit stride over D) rotated by the fp32
    tables cos, sin [.., T, D/2]; returns a contiguous [1, H, T, D]."""
    _, H, T, D = x.shape
    if x.stride(3) != 1:
        x = x.contiguous()
    out = torch.empty((1, H, T, D), dtype=x.dtype, device=x.device)
    _rope_kernel[(H * T,)](x, cos.contiguous(), sin.contiguous(), out, T, H, x.stride(1), x.stride(2),
                           HALF=D // 2, **overlap.launch(x.device))
    return out
