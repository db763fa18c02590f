"""One chunk of a streaming causal convolution (batch 1, zero-padded start): the input tail kept
from the chunks before, then this chunk, with an optional ELU on the chunk first and a residual
added after; and one chunk of a streaming transposed convolution, whose output samples still
waiting for the next chunk's contribution are kept as partial sums. On CUDA, fp32 batch-1
ungrouped ones run as engine.kernels.stream_conv and stream_convtr (the ELU, the tail or the
partial sums and the residual fused); other devices and grouped ones run the torch formulas
below.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import dispatch


def _on_kernel(x: torch.Tensor, layer: nn.Module) -> bool:
    return dispatch.use_triton(x) and x.dtype == torch.float32 and layer.groups == 1 and x.shape[0] == 1


def streaming_conv(x: torch.Tensor, tail: torch.Tensor | None, conv: nn.Conv1d, elu: float | None,
                   residual: torch.Tensor | None) -> torch.Tensor:
    """x [1, C_in, T]; tail [1, C_in, L] (updated to the last L samples of tail + chunk; None
    for L = 0); `elu`: the alpha of an ELU applied to x first. Returns conv(tail + chunk)
    (+ residual)."""
    if _on_kernel(x, conv):
        from ..kernels.stream_conv import stream_conv

        return stream_conv(x, tail, conv.weight, conv.bias, conv.stride[0], conv.dilation[0], elu, residual)
    if elu is not None:
        x = F.elu(x, elu)
    if tail is not None:
        x = torch.cat([tail, x], dim=-1)
        tail.copy_(x[..., -tail.shape[-1]:])
    y = conv(x)
    return y if residual is None else residual + y


def streaming_conv_transpose(x: torch.Tensor, partial: torch.Tensor | None, convtr: nn.ConvTranspose1d,
                             elu: float | None) -> torch.Tensor:
    """x [1, C_in, T]; partial [1, C_out, K - stride] (the sums the chunks before left for the
    first K - stride samples, bias excluded; updated to this chunk's; None for K = stride);
    `elu`: the alpha of an ELU applied to x first. Returns the chunk's stride * T samples."""
    stride = convtr.stride[0]
    if (_on_kernel(x, convtr) and convtr.kernel_size[0] >= stride
            and (convtr.padding[0], convtr.output_padding[0], convtr.dilation[0]) == (0, 0, 1)):
        from ..kernels.stream_convtr import stream_conv_transpose

        return stream_conv_transpose(x, partial, convtr.weight, convtr.bias, stride, elu)
    y = convtr(x if elu is None else F.elu(x, elu))
    if partial is None:
        return y
    over = partial.shape[-1]
    y = torch.cat([y[..., :over] + partial, y[..., over:]], dim=-1)
    pending = y[..., -over:]
    if convtr.bias is not None:
        # The bias is added once, when the sample is finally emitted.
        pending = pending - convtr.bias[:, None]
    partial.copy_(pending)
    return y[..., :-over]
