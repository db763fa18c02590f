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

    def of_step(self, step: int, rows: int) -> Int8Weight:
        """Rows [step * rows, (step + 1) * rows): one step's weights of a per-step stack."""
        return Int8Weight(self.q[step * rows:(step + 1) * rows], self.scb[step * rows:(step + 1) * rows])


GROUP_SIZE = 64
"""Inputs per scale of an int4 weight (engine.quant4)."""
INT4_SCALE = "_int4_scale"
"""Suffix of an int4 parameter's group scales, beside the packed parameter (engine.quant4)."""


class Int4Weight(NamedTuple):
    """A linear weight in our int4 layout (engine.quant4): weight k of row n is
    (nibble k of row n - 8) * scale[n, k // group], the even k in a byte's low nibble."""
    q: torch.Tensor  # uint8 [N, K/2]
    scale: torch.Tensor  # bfloat16 [N, ceil(K / group)]
    group: int = GROUP_SIZE

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.q.shape[0], 2 * self.q.shape[1]))

    def of_step(self, step: int, rows: int) -> Int4Weight:
        """Rows [step * rows, (step + 1) * rows): one step's weights of a per-step stack."""
        return Int4Weight(self.q[step * rows:(step + 1) * rows], self.scale[step * rows:(step + 1) * rows],
                          self.group)


class Norm(NamedTuple):
    """A norm applied to a product's input row: "rms" (weight = alpha, no bias) or "layer"."""
    kind: str
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float


INT8_ROW_SCALE = "_int8_scale"
"""Suffix of an int8 embedding table's row scales, beside the table (engine.quant4)."""


class Int8Rows(NamedTuple):
    """An embedding table in int8 (engine.quant4's int4 layout): row v is q[v] * scale[v],
    computed in fp32 and rounded once to the activation dtype."""
    q: torch.Tensor  # int8 [V, D]
    scale: torch.Tensor  # float32 [V]: each row's absolute maximum / 127
