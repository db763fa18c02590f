"""Causal convolutions that run either on a whole signal or one chunk at a time.

Streaming state lives in declared fixed-size regions: a conv keeps the last
(effective kernel - stride) input samples (its *tail*); a transposed conv keeps the
(kernel - stride) output samples still waiting for the next chunk's contribution (its
*partial* sums, bias excluded). Both are batch 1. Whole-signal calls pad the same way a
fresh stream would, so both paths give the same samples.

Parameter names add the official checkpoint's extra nesting level (`conv.conv.weight`,
`convtr.convtr.weight`: the released weights were trained under a norm wrapper).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ....ops.conv import streaming_conv, streaming_conv_transpose
from ....state import Region, Store


class _Nest(nn.Module):
    """One extra named level, so keys read like the official checkpoint."""

    def __init__(self, name: str, layer: nn.Module):
        super().__init__()
        self.add_module(name, layer)


class StreamingConv1d(nn.Module):
    def __init__(self, name: str, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, dilation: int = 1, groups: int = 1, bias: bool = True,
                 pad_mode: str = "constant"):
        super().__init__()
        if pad_mode not in ("constant", "replicate"):
            raise ValueError(f"{name}: unknown pad_mode {pad_mode!r}")
        self.name, self.pad_mode = name, pad_mode
        self.stride = stride
        self.tail_len = (kernel_size - 1) * dilation + 1 - stride
        self.conv = _Nest("conv", nn.Conv1d(in_channels, out_channels, kernel_size, stride,
                                            dilation=dilation, groups=groups, bias=bias))

    @property
    def layer(self) -> nn.Conv1d:
        return self.conv.conv

    def regions(self) -> list[Region]:
        if self.tail_len <= 0:
            return []
        shape = (1, self.layer.in_channels, self.tail_len)
        regions = [Region(f"{self.name}.tail", shape, self.layer.weight.dtype)]
        if self.pad_mode == "replicate":
            # Replicate padding fills the tail with the first sample the stream ever sees.
            regions.append(Region(f"{self.name}.started", (1,), torch.bool))
        return regions

    def forward(self, x: torch.Tensor, store: Store | None = None, elu: float | None = None,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, C, T] with T a multiple of the stride (B must be 1 when streaming); `elu`: the
        alpha of an ELU applied to x first; `residual` is added to the output."""
        if x.shape[-1] % self.stride:
            raise ValueError(f"{self.name}: length {x.shape[-1]} is not a multiple of stride {self.stride}")
        if store is not None:
            tail = store[f"{self.name}.tail"] if self.tail_len > 0 else None
            if tail is not None and self.pad_mode == "replicate":  # the first chunk's first sample, repeated
                started = store[f"{self.name}.started"]
                first = x[..., :1] if elu is None else F.elu(x[..., :1], elu)
                tail.copy_(torch.where(started, tail, first))
                started.fill_(True)
            return streaming_conv(x, tail, self.layer, elu, residual)
        if elu is not None:
            x = F.elu(x, elu)
        if self.tail_len > 0:
            if self.pad_mode == "replicate":
                x = torch.cat([x[..., :1].expand(*x.shape[:-1], self.tail_len), x], dim=-1)
            else:
                x = F.pad(x, (self.tail_len, 0))
        y = self.layer(x)
        return y if residual is None else residual + y


class StreamingConvTranspose1d(nn.Module):
    def __init__(self, name: str, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        self.name = name
        self.overlap = kernel_size - stride
        self.convtr = _Nest("convtr", nn.ConvTranspose1d(in_channels, out_channels, kernel_size,
                                                         stride, groups=groups, bias=bias))

    @property
    def layer(self) -> nn.ConvTranspose1d:
        return self.convtr.convtr

    def regions(self) -> list[Region]:
        if self.overlap <= 0:
            return []
        shape = (1, self.layer.out_channels, self.overlap)
        return [Region(f"{self.name}.partial", shape, self.layer.weight.dtype)]

    def forward(self, x: torch.Tensor, store: Store | None = None, elu: float | None = None) -> torch.Tensor:
        """`elu`: the alpha of an ELU applied to x first."""
        if store is not None:
            partial = store[f"{self.name}.partial"] if self.overlap > 0 else None
            return streaming_conv_transpose(x, partial, self.layer, elu)
        y = self.layer(x if elu is None else F.elu(x, elu))
        # Causal: everything past the last input's stride is future overlap; drop it.
        return y if self.overlap <= 0 else y[..., :-self.overlap]
