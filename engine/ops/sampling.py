"""Drawing tokens by the exponential race (moshi.utils.sampling): softmax of logits /
temperature, the top k probabilities, then argmax(p / Exp(1)) over them. On CUDA the audio
codebooks, and the text vocabulary at a small top-k, take one kernel for all rows
(engine.kernels.topk_sampling: `one_kernel_serves`), drawing the same exponentials in the same
order.
"""
from __future__ import annotations

import torch

from ..kernels import one_kernel_serves
from . import dispatch


def race(logits: torch.Tensor, top_k: int, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits [R, V] -> tokens [R] (int64), one draw per row; top_k 0: over the whole vocabulary."""
    if top_k > 0 and logits.dim() == 2 and dispatch.use_triton(logits):
        k = min(top_k, logits.shape[-1])
        if one_kernel_serves(logits.shape[-1], k):  # the audio codebooks, and text at a small top-k
            from ..kernels.topk_sampling import topk_sample

            return topk_sample(logits, k, temperature, generator)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_k > 0:
        probs, candidates = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1)
    else:
        candidates = None
    pick = (probs / torch.empty_like(probs).exponential_(1, generator=generator)).argmax(dim=-1, keepdim=True)
    return (pick if candidates is None else candidates.gather(-1, pick)).view(-1)
