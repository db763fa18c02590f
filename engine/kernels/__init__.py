"""Kernels the models call on CUDA: attention over a ring KV cache that reads its valid
length from device memory, fused norm/RoPE, matrix-vector products with the layer's
elementwise work fused in, and one-kernel top-k sampling. All Triton, compiled on first
use and cached by Triton on disk (~/.triton/cache, or TRITON_CACHE_DIR).

`usable(tensor)` decides, once per process, whether they run: on CUDA with Triton and the C
compiler Triton builds its launcher with. Otherwise the torch formulas run instead (the
CPU path), and the reason is logged once. The decision never depends on the runtime
toggles, so graph replay and demand-sized state always run the same kernels.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil

import torch

log = logging.getLogger(__name__)
MAX_ROWS = 8
"""Rows (positions) up to which a matrix product runs as the fused kernel; beyond, torch's do.
Here, not in fused_linear, so that asking needs no Triton."""
DISABLE_ENV = "DUPLEXCADENCE_TORCH_KERNELS"
"""Set to 1 to run the torch formulas on CUDA too (to compare the two)."""


@functools.cache
def unavailable_reason() -> str | None:
    """Why the Triton kernels cannot run on this machine, or None when they can."""
    if os.environ.get(DISABLE_ENV) == "1":
        return f"{DISABLE_ENV}=1"
    try:
        import triton  # noqa: F401
    except ImportError as error:
        return f"Triton is not installed ({error})"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        return "no C compiler (cc, gcc or clang) to build Triton's kernel launcher"
    return None


def usable(x: torch.Tensor) -> bool:
    """Whether x's computation runs on the Triton kernels."""
    if not x.is_cuda:
        return False
    reason = unavailable_reason()
    if reason is not None:
        _log_fallback(reason)
    return reason is None


@functools.cache
def _log_fallback(reason: str) -> None:
    log.warning("fused CUDA kernels off, running torch's kernels instead: %s", reason)
