"""Token sampling on the device: temperature, top-k, or greedy, from a seeded torch.Generator.

Draws the same random numbers as the reference (`moshi.utils.sampling`): softmax of
logits / temperature, the top k probabilities, then argmax(p / Exp(1)) over them (the
exponential-race form of a categorical draw, which needs no host synchronization). On CUDA
a small vocabulary takes one kernel for all of it (engine.ops.sampling chooses), drawing
the same exponentials.
"""
from __future__ import annotations

import dataclasses

import torch

from ....ops.sampling import race


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    temperature: float
    top_k: int
    greedy: bool = False


def sample(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """logits [R, V] -> tokens [R] (int64): one draw per row."""
    if p.greedy or p.temperature <= 0.0:
        return logits.float().argmax(dim=-1)
    return race(logits, p.top_k, p.temperature, generator)


def draw_unused(p: SamplingParams, vocab: int, generator: torch.Generator | None, device: torch.device) -> None:
    """Draw the random numbers `sample` would draw for one row of `vocab` logits, and use none:
    a teacher-forced step left out leaves the generator where running it would have, so every
    later draw is the one it would have been."""
    if p.greedy or p.temperature <= 0.0:
        return
    k = min(p.top_k, vocab) if p.top_k > 0 else vocab  # as race and topk_sample draw: [rows, k]
    torch.empty(1, k, dtype=torch.float32, device=device).exponential_(1, generator=generator)
