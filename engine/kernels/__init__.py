"""Triton kernels for CUDA: attention over a ring KV cache that reads its valid length from
device memory, fused norm/RoPE, matrix-vector products with the layer's elementwise work
fused in, one-kernel top-k sampling, the LM's summed input embedding and delay lines, Mimi's
quantizer and SEANet's streaming convolutions; each launched overlapped where the GPU allows
it and it is turned on (overlap.py). Compiled on first use and cached by Triton on disk
(~/.triton/cache, or TRITON_CACHE_DIR).

This package imports nothing from the rest of the engine (only torch, Triton, the standard
library and its own modules): the types its kernels take are in `operands.py`. Whether a
kernel runs is decided in one place, `engine.ops` (the seam between torch and Triton), from
what this module states without importing Triton: `unavailable_reason()` and the shape
limits below.
"""
from __future__ import annotations

import functools
import os
import shutil

MAX_ROWS = 8
"""Rows (positions) up to which a matrix product runs as the fused kernel (fused_linear.py)."""
MAX_WAKE_ROWS = 32
"""Rows up to which a product runs as the many-row kernel (rows_linear.py): a DiffuPlex wake's
catch-up + current + K future positions, 2K + 1 rows up to K = 15."""
TRITON_MAX_T = 32
"""Queries per step up to which ring attention runs as the split-K kernel (ring_attention_triton.py):
as many as a wake's rows (its grid has one program per query; nothing in it bounds T)."""
MAX_VOCAB = 4096
"""Vocabularies up to which top-k sampling runs as one kernel (topk_sampling.py)."""
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
