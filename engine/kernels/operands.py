"""The types the kernels take besides plain tensors, importable without Triton."""
from __future__ import annotations

from typing import NamedTuple

import torch

LEVELS = 127.0
"""An int8 weight's levels each side of zero: a row's weights are q * scb / LEVELS."""


class Int8Weight(NamedTuple):
    """A linear weight in the q8 layout (engine.quant): one scale per output row."""
    q: torch.Tensor  # int8 [N, K]
    scb: torch.Tensor  # float32 [N]: each row's absolute maximum

    @property
    def shape(self) -> torch.Size:
        return self.q.shape


class Norm(NamedTuple):
    """A norm applied to a product's input row: "rms" (weight = alpha, no bias) or "layer"."""
    kind: str
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float
