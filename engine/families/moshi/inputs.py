"""What enters the Moshi LM in one frame, and what its backbone stage leaves for the depformer."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch


@dataclasses.dataclass(frozen=True)
class LMInputs:
    """What enters the LM from outside in one frame."""
    user: torch.Tensor | None
    """[user_q] the user's codes (int64, on the LM's device); None: PersonaPlex predicts them."""
    model: torch.Tensor | None = None
    """[model_q] force the model's own codebooks (prompts)."""
    text: torch.Tensor | None = None
    """[1] force the text token (prompts)."""
    embedding: torch.Tensor | None = None
    """[1, 1, dim] replaces the summed input embeddings (a replayed voice prompt)."""
    generated: torch.Tensor | None = None
    """[1 + dep_q] what this frame generates, known already (a frame consumed from a
    prediction): in a multi-position wake such a frame only writes history."""


class Wake(NamedTuple):
    """The backbone stage's outputs: what the depformer takes, and the wake's input."""
    embedding: torch.Tensor  # [1, N, dim]: the input embeddings (what a voice prompt saves)
    hidden: torch.Tensor  # [1, 1, dim]: the temporal transformer's output at the last position
    text_token: torch.Tensor  # [1]
    target: torch.Tensor  # [n_q + 1]: tokens already in the slot this frame generates
    forced: torch.Tensor  # [n_q + 1]: which of them came from outside (teacher forcing)
