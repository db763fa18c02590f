"""Layers of the causal HiFT vocoder (CosyVoice3's `CausalHiFTGenerator`), in the official key layout.

Every convolution is causal: it sees only the past, except the two that are given an explicit
look-ahead (the mel input conv and the F0 predictor's first conv), which read frames to their
right. Weight norm is torch's parametrization, so keys read `<conv>.parametrizations.weight.original0`
(g) and `.original1` (v) exactly as in the official `hift.pt`.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

SNAKE_EPS = 1e-9
"""Added to Snake's alpha before dividing, as in the trained model."""


def weight_as(conv: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    """`conv`'s weight in `dtype`. A weight-normed weight is normalised in `dtype` from its parts
    cast first: the stock F0 predictor converts the whole module to float64, so g and v are float64
    before the norm is taken, and only this order reproduces its F0 to the last bit."""
    if parametrize.is_parametrized(conv, "weight"):
        parts = conv.parametrizations.weight
        return torch._weight_norm(parts.original1.to(dtype), parts.original0.to(dtype), 0)
    return conv.weight.to(dtype)


def _conv_weights(conv: nn.Conv1d, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    if next(conv.parameters()).dtype == dtype:
        return conv.weight, conv.bias  # the module's own dtype: the parametrization as registered
    return weight_as(conv, dtype), None if conv.bias is None else conv.bias.to(dtype)


class CausalConv1d(nn.Conv1d):
    """Stride-1 conv that pads `pad` = (kernel - 1) * dilation zeros on one side only: the left
    (history) normally, the right (look-ahead) with `right=True`. Output length = input length,
    or input length - pad with `padded=False`, when the input already carries that context."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 right: bool = False):
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
        self.pad, self.right = (kernel_size - 1) * dilation, right

    def forward(self, x: torch.Tensor, padded: bool = True) -> torch.Tensor:
        if padded:
            x = F.pad(x, (0, self.pad) if self.right else (self.pad, 0))
        weight, bias = _conv_weights(self, x.dtype)
        return F.conv1d(x, weight, bias, dilation=self.dilation)


class DownsampleConv1d(nn.Conv1d):
    """Strided conv with `stride - 1` zeros of history: T * stride samples in, T out."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        if stride < 2 or kernel_size % stride:
            raise ValueError(f"downsampling needs stride > 1 dividing the kernel, got kernel {kernel_size} "
                             f"stride {stride}")
        super().__init__(in_channels, out_channels, kernel_size, stride)
        self.pad = stride - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.pad, 0)))


class UpsampleConv1d(nn.Conv1d):
    """Nearest-neighbour upsampling by `rate`, then a causal conv: T frames in, T * rate out."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, rate: int):
        super().__init__(in_channels, out_channels, kernel_size)
        self.rate, self.pad = rate, kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x.repeat_interleave(self.rate, dim=-1), (self.pad, 0)))


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha, one alpha per channel (linear scale)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        return x + (1.0 / (alpha + SNAKE_EPS)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    """Per dilation: x += conv2(snake(conv1(snake(x)))), conv1 dilated, conv2 not; all causal."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()
        self.convs1 = nn.ModuleList(weight_norm(CausalConv1d(channels, channels, kernel_size, d)) for d in dilations)
        self.convs2 = nn.ModuleList(weight_norm(CausalConv1d(channels, channels, kernel_size)) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    @property
    def history(self) -> int:
        """Frames of history one output frame depends on."""
        return sum(conv.pad for conv in (*self.convs1, *self.convs2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class CausalF0Predictor(nn.Module):
    """Mel -> F0 (Hz) per frame: five weight-normed convs with ELU (the first looks 3 frames ahead,
    the others 2 back), a linear head, |.|. Runs in the input's dtype, whatever the parameters' dtype:
    the vocoder feeds it float64, since small F0 errors grow into phase errors over a stream."""

    LOOKAHEAD_KERNEL, KERNEL, LAYERS = 4, 3, 5

    def __init__(self, in_channels: int = 80, cond_channels: int = 512):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(self.LAYERS):
            first = i == 0
            conv = CausalConv1d(in_channels if first else cond_channels, cond_channels,
                                self.LOOKAHEAD_KERNEL if first else self.KERNEL, right=first)
            layers += [weight_norm(conv), nn.ELU()]
        self.condnet = nn.Sequential(*layers)  # ELUs included: keys are condnet.0, .2, .4, ...
        self.classifier = nn.Linear(cond_channels, 1)

    @property
    def lookahead(self) -> int:
        return self.condnet[0].pad

    @property
    def history(self) -> int:
        return sum(layer.pad for layer in self.condnet[2::2])

    def forward(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel [B, C, T] -> F0 [B, T]; with finalize=False the last `lookahead` frames are context
        only (no zero padding), so T - lookahead frames come out."""
        x = mel
        for i in range(0, len(self.condnet), 2):
            x = F.elu(self.condnet[i](x, padded=finalize or i > 0))
        weight, bias = self.classifier.weight.to(x.dtype), self.classifier.bias.to(x.dtype)
        return F.linear(x.transpose(1, 2), weight, bias).squeeze(-1).abs()
