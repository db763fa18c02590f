"""SEANet encoder and decoder (causal), laid out like the official checkpoint.

Layers sit in a `model` list whose indices count the parameter-free ELUs too, because the
checkpoint keys do (`encoder.model.3.conv.conv.weight` is the first downsampling conv).
"""
from __future__ import annotations

import torch
from torch import nn

from ..config.mimi import SeanetConfig
from ..state import Region, Store
from .conv import StreamingConv1d, StreamingConvTranspose1d


def run_layers(layers: nn.ModuleList, x: torch.Tensor, store: Store | None) -> torch.Tensor:
    for layer in layers:
        x = layer(x) if isinstance(layer, nn.ELU) else layer(x, store)
    return x


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
        skip = x if isinstance(self.shortcut, nn.Identity) else self.shortcut(x, store)
        return skip + run_layers(self.block, x, store)


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
