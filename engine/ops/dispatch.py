"""Whether a computation runs on the Triton kernels: the one test every op shares.

Decided once per process from the machine (engine.kernels.unavailable_reason): on CUDA with
Triton and the C compiler Triton builds its launcher with, and `DUPLEXCADENCE_TORCH_KERNELS`
not 1. Otherwise the torch formulas run, and the reason is logged once.
"""
from __future__ import annotations

import functools
import logging

import torch

from ..kernels import unavailable_reason

log = logging.getLogger(__name__)


def use_triton(x: torch.Tensor) -> bool:
    """Whether x's computation runs on the Triton kernels (the shape limits aside)."""
    if not x.is_cuda:
        return False
    reason = unavailable_reason()
    if reason is not None:
        _log_fallback(reason)
    return reason is None


@functools.cache
def _log_fallback(reason: str) -> None:
    log.warning("fused CUDA kernels off, running torch's kernels instead: %s", reason)
