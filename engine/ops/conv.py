"""One chunk of a streaming causal convolution (batch 1, zero-padded start): the input tail kept
from the chunks before, then this chunk, with an optional ELU on the chunk first and a residual
added after. On CUDA, fp32 batch-1 convolutions run as engine.kernels.stream_conv (the ELU, the
tail and the residual fused); other devices run the torch formula below.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import dispatch


def streaming_conv(x: torch.Tensor, tail: torch.Tensor | None, conv: nn.Conv1d, elu: float | None,
                   residual: torch.Tensor | None) -> torch.Tensor:
    """x [1, C_in, T]; tail [1, C_in, L] (updated to the last L samples of tail + chunk; None
    for L = 0); `elu`: the alpha of an ELU applied to x first. Returns conv(tail + chunk)
    (+ residual)."""
    if dispatch.use_triton(x) and x.dtype == torch.float32 and conv.groups == 1 and x.shape[0] == 1:
        from ..kernels.stream_conv import stream_conv

        return stream_conv(x, tail, conv.weight, conv.bias, conv.stride[0], conv.dilation[0], elu, residual)
    if elu is not None:
        x = F.elu(x, elu)
    if tail is not None:
        x = torch.cat([tail, x], dim=-1)
        tail.copy_(x[..., -tail.shape[-1]:])
    y = conv(x)
    return y if residual is None else residual + y
