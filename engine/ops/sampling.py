"""Drawing tokens by the exponential race (moshi.utils.sampling): softmax of logits /
temperature, the top k probabilities, then argmax(p / Exp(1)) over them. On CUDA a
vocabulary of at most MAX_VOCAB takes one kernel for all rows (engine.kernels.topk_sampling),
drawing the same exponentials in the same order.
"""
from __future__ import annotations

import torch

from ..kernels import MAX_VOCAB
from . import dispatch


def race(logits: torch.Tensor, top_k: int, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits [R, V] -> tokens [R] (int64), one draw per row; top_k 0: over the whole vocabulary."""
    if top_k > 0 and logits.dim() == 2 and dispatch.use_triton(logits) and logits.shape[-1] <= MAX_VOCAB:
        from ..kernels.topk_sampling import topk_sample  # the audio codebooks; text's 32000 take torch's

        return topk_sample(logits, min(top_k, logits.shape[-1]), temperature, generator)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_k > 0:
        probs, candidates = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1)
    else:
        candidates = None
    pick = (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(dim=-1, keepdim=True)
    return (pick if candidates is None else candidates.gather(-1, pick)).view(-1)
