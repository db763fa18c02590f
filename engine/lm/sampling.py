"""Token sampling on the device: temperature, top-k, or greedy, from a seeded torch.Generator.

Draws the same random numbers as the reference (`moshi.utils.sampling`): softmax of
logits / temperature, the top k probabilities, then argmax(p / Exp(1)) over them (the
exponential-race form of a categorical draw, which needs no host synchronization). On CUDA
a small vocabulary takes one kernel for all of it (engine.kernels.topk_sampling), drawing
the same exponentials.
"""
from __future__ import annotations

import dataclasses

import torch

from .. import kernels


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    temperature: float
    top_k: int
    greedy: bool = False


def sample(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """logits [R, V] -> tokens [R] (int64): one draw per row."""
    if p.greedy or p.temperature <= 0.0:
        return logits.float().argmax(dim=-1)
    if p.top_k > 0 and logits.dim() == 2 and kernels.usable(logits):
        from ..kernels.topk_sampling import MAX_VOCAB, topk_sample

        if logits.shape[-1] <= MAX_VOCAB:  # the audio codebooks; text's 32000 take the torch path
            return topk_sample(logits, min(p.top_k, logits.shape[-1]), p.temperature, generator)
    logits = logits.float()
    probs = torch.softmax(logits / p.temperature, dim=-1)
    if p.top_k > 0:
        probs, candidates = torch.topk(probs, min(p.top_k, probs.shape[-1]), dim=-1)
    else:
        candidates = None
    race = probs / torch.empty_like(probs).exponential_(1, generator=generator)
    pick = race.argmax(dim=-1, keepdim=True)
    return (pick if candidates is None else candidates.gather(-1, pick)).view(-1)
