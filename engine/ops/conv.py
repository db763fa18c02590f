"""One chunk of a streaming causal convolution (batch 1, zero-padded start): the input tail kept
from the chunks before, then this chunk, with an optional ELU on the chunk first and a residual
added after. On CUDA, small fp32 convolutions run as engine.kernels.stream_conv (the ELU, the
tail and the residual fused: SEANet's residual blocks and its outer convolutions); larger ones
(the down- and upsampling, over a few MB of weights) and every other device run the torch
formula below, cuDNN's kernels on CUDA.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import dispatch

SMALL_CONV_BYTES = 2 << 20
"""Weights up to which a convolution runs as the fused kernel: SEANet's residual blocks and its
first and last convolutions. Its product runs on plain fp32 arithmetic; the down- and
upsampling convolutions, up to 33 MB, stay on cuDNN."""


def streaming_conv(x: torch.Tensor, tail: torch.Tensor | None, conv: nn.Conv1d, elu: float | None,
                   residual: torch.Tensor | None) -> torch.Tensor:
    """x [1, C_in, T]; tail [1, C_in, L] (updated to the last L samples of tail + chunk; None
    for L = 0); `elu`: the alpha of an ELU applied to x first. Returns conv(tail + chunk)
    (+ residual)."""
    weight = conv.weight
    if (dispatch.use_triton(x) and x.dtype == torch.float32 and conv.groups == 1 and x.shape[0] == 1
            and weight.numel() * weight.element_size() <= SMALL_CONV_BYTES):
        from ..kernels.stream_conv import stream_conv

        return stream_conv(x, tail, weight, conv.bias, conv.stride[0], conv.dilation[0], elu, residual)
    if elu is not None:
        x = F.elu(x, elu)
    if tail is not None:
        x = torch.cat([tail, x], dim=-1)
        tail.copy_(x[..., -tail.shape[-1]:])
    y = conv(x)
    return y if residual is None else residual + y
