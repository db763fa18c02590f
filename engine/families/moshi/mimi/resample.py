"""Learned resampling between the encoder rate (25 Hz) and the codec frame rate (12.5 Hz).

Down: a causal conv (kernel 2*stride, no bias) mixing all channels, replicate-padded
with the stream's first latent. Up: a causal transposed conv with one filter per
channel (groups = dimension): the reference keeps this "channel-wise" form for Mimi for
compatibility with the released weights.
"""
from __future__ import annotations

import torch
from torch import nn

from ....state import Region, Store
from .streaming_conv import StreamingConv1d, StreamingConvTranspose1d


class ConvDownsample(nn.Module):
    def __init__(self, name: str, stride: int, dimension: int):
        super().__init__()
        self.conv = StreamingConv1d(f"{name}.conv", dimension, dimension, 2 * stride, stride,
                                    bias=False, pad_mode="replicate")

    def regions(self) -> list[Region]:
        return self.conv.regions()

    def forward(self, x: torch.Tensor, store: Store | None = None) -> torch.Tensor:
        return self.conv(x, store)


class ConvTrUpsample(nn.Module):
    def __init__(self, name: str, stride: int, dimension: int):
        super().__init__()
        self.convtr = StreamingConvTranspose1d(f"{name}.convtr", dimension, dimension, 2 * stride,
                                               stride, groups=dimension, bias=False)

    def regions(self) -> list[Region]:
        return self.convtr.regions()

    def forward(self, x: torch.Tensor, store: Store | None = None) -> torch.Tensor:
        return self.convtr(x, store)
