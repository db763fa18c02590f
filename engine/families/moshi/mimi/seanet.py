"""SEANet encoder and decoder (causal), laid out like the official checkpoint.

Layers sit in a `model` list whose indices count the parameter-free ELUs too, because the
checkpoint keys do (`encoder.model.3.conv.conv.weight` is the first downsampling conv).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ....state import Region, Store
from .mimi_config import SeanetConfig
from .streaming_conv import StreamingConv1d, StreamingConvTranspose1d


def run_layers(layers: nn.ModuleList, x: torch.Tensor, store: Store | None) -> torch.Tensor:
    """The layers in order, each ELU handed to the convolution after it (which can apply it as
    it reads its input: engine.ops.conv)."""
    elu = None
    for layer in layers:
        if elu is not None and not isinstance(layer, (StreamingConv1d, StreamingConvTranspose1d)):
            x, elu = F.elu(x, elu), None
        if isinstance(layer, nn.ELU):
            elu = layer.alpha
        else:
            x = layer(x, store) if elu is None else layer(x, store, elu=elu)
            elu = None
    return x if elu is None else F.elu(x, elu)


def layer_regions(layers) -> list[Region]:
    return [r for layer in layers if not isinstance(layer, nn.ELU) for r in layer.regions()]


class ResnetBlock(nn.Module):
    def __init__(self, name: str, cfg: SeanetConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList([
            nn.ELU(cfg.elu_alpha),
            StreamingConv1d(f"{name}.block.1", dim, hidden, cfg.residual_kernel_size,
                            dilation=dilation, pad_mode=cfg.pad_mode),
            nn.ELU(cfg.elu_alpha),
            StreamingConv1d(f"{name}.block.3", hidden, dim, 1, pad_mode=cfg.pad_mode),
        ])
        self.shortcut = (nn.Identity() if cfg.true_skip
                         else StreamingConv1d(f"{name}.shortcut", dim, dim, 1, pad_mode=cfg.pad_mode))

    def regions(self) -> list[Region]:
        skip = [] if isinstance(self.shortcut, nn.Identity) else self.shortcut.regions()
        return skip + layer_regions(self.block)

    def forward(self, x: torch.Tensor, store: Store | None = None) -> torch.Tensor:
        """skip(x) + conv(ELU(conv(ELU(x)))), the skip added by the last convolution."""
        skip = x if isinstance(self.shortcut, nn.Identity) else self.shortcut(x, store)
        elu1, conv1, elu2, conv2 = self.block
        h = conv1(x, store, elu=elu1.alpha)
        return conv2(h, store, elu=elu2.alpha, residual=skip)


class _LayerStack(nn.Module):
    """A `model` list of streaming layers run in order, their regions in the same order."""

    def regions(self) -> list[Region]:
        return layer_regions(self.model)

    def forward(self, x: torch.Tensor, store: Store | None = None) -> torch.Tensor:
        return run_layers(self.model, x, store)


class SeanetEncoder(_LayerStack):
    """Audio [B, channels, T] -> latent [B, dimension, T / hop]."""

    def __init__(self, cfg: SeanetConfig, name: str):
        super().__init__()
        self.name = name
        layers: list[nn.Module] = []

        def here() -> str:
            return f"{name}.model.{len(layers)}"

        width = cfg.n_filters
        layers.append(StreamingConv1d(here(), cfg.channels, width, cfg.kernel_size, pad_mode=cfg.pad_mode))
        for ratio in reversed(cfg.ratios):
            for j in range(cfg.n_residual_layers):
                layers.append(ResnetBlock(here(), cfg, width, cfg.dilation_base ** j))
            layers.append(nn.ELU(cfg.elu_alpha))
            layers.append(StreamingConv1d(here(), width, 2 * width, 2 * ratio, stride=ratio,
                                          pad_mode=cfg.pad_mode))
            width *= 2
        layers.append(nn.ELU(cfg.elu_alpha))
        layers.append(StreamingConv1d(here(), width, cfg.dimension, cfg.last_kernel_size,
                                      pad_mode=cfg.pad_mode))
        self.model = nn.ModuleList(layers)



class SeanetDecoder(_LayerStack):
    """Latent [B, dimension, T] -> audio [B, channels, T * hop]."""

    def __init__(self, cfg: SeanetConfig, name: str):
        super().__init__()
        self.name = name
        layers: list[nn.Module] = []

        def here() -> str:
            return f"{name}.model.{len(layers)}"

        width = cfg.n_filters * 2 ** len(cfg.ratios)
        layers.append(StreamingConv1d(here(), cfg.dimension, width, cfg.kernel_size, pad_mode=cfg.pad_mode))
        for ratio in cfg.ratios:
            layers.append(nn.ELU(cfg.elu_alpha))
            layers.append(StreamingConvTranspose1d(here(), width, width // 2, 2 * ratio, stride=ratio))
            width //= 2
            for j in range(cfg.n_residual_layers):
                layers.append(ResnetBlock(here(), cfg, width, cfg.dilation_base ** j))
        layers.append(nn.ELU(cfg.elu_alpha))
        layers.append(StreamingConv1d(here(), width, cfg.channels, cfg.last_kernel_size,
                                      pad_mode=cfg.pad_mode))
        self.model = nn.ModuleList(layers)
