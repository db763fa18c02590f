"""Mimi configuration as data, and the official Mimi's values.

`OFFICIAL` is the released codec's configuration in the reference runtime's format (the
`_mimi_config` dict of moshi/models/loaders.py); mimi_json.py turns that format into a
validated `MimiConfig`.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

from ....config.transformer_config import TransformerConfig

# The official Mimi (tokenizer-e351c8d8-checkpoint125) in the reference's dict format.
OFFICIAL: dict[str, Any] = {
    "sample_rate": 24000,
    "channels": 1,
    "frame_rate": 12.5,
    "seanet": {
        "channels": 1, "dimension": 512, "causal": True, "n_filters": 64,
        "n_residual_layers": 1, "activation": "ELU", "compress": 2, "dilation_base": 2,
        "disable_norm_outer_blocks": 0, "kernel_size": 7, "residual_kernel_size": 3,
        "last_kernel_size": 3, "norm": "none", "pad_mode": "constant",
        "ratios": [8, 6, 5, 4], "true_skip": True,
    },
    "quantizer": {
        "dimension": 256, "n_q": 32, "bins": 2048, "input_dimension": 512, "output_dimension": 512,
    },
    "transformer": {
        "d_model": 512, "num_heads": 8, "num_layers": 8, "causal": True, "layer_scale": 0.01,
        "context": 250, "conv_layout": True, "max_period": 10000, "gating": "none",
        "norm": "layer_norm", "positional_embedding": "rope", "dim_feedforward": 2048,
        "input_dimension": 512, "output_dimensions": [512],
    },
}

@dataclasses.dataclass(frozen=True)
class SeanetConfig:
    channels: int
    dimension: int
    n_filters: int
    n_residual_layers: int
    ratios: tuple[int, ...]
    """Decoder order (upsampling); the encoder walks them reversed."""
    kernel_size: int
    residual_kernel_size: int
    last_kernel_size: int
    dilation_base: int
    compress: int
    true_skip: bool
    pad_mode: str
    elu_alpha: float

    @property
    def hop_length(self) -> int:
        return math.prod(self.ratios)


@dataclasses.dataclass(frozen=True)
class QuantizerConfig:
    dimension: int
    n_q: int
    bins: int
    n_q_semantic: int
    input_dimension: int
    output_dimension: int


@dataclasses.dataclass(frozen=True)
class ProjectedTransformerConfig:
    core: TransformerConfig
    input_dimension: int
    output_dimension: int


@dataclasses.dataclass(frozen=True)
class MimiConfig:
    sample_rate: int
    frame_rate: float
    seanet: SeanetConfig
    quantizer: QuantizerConfig
    transformer: ProjectedTransformerConfig
    raw: dict
    """The reference-format dict this config was built from (written back by `to_dict`)."""

    @property
    def frame_size(self) -> int:
        return int(self.sample_rate / self.frame_rate)

    @property
    def resample_stride(self) -> int:
        """Encoder steps per codec frame (2 for Mimi: 25 Hz -> 12.5 Hz); 1 = no resampling."""
        return self.frame_size // self.seanet.hop_length

    def to_dict(self) -> dict:
        return copy.deepcopy(self.raw)
