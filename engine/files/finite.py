"""Non-finite audio samples, made finite where PCM enters the engine.

One NaN reaching Mimi spreads through its convolution tails and attention caches and never
leaves: every later frame is NaN inside, so the model goes deaf for the rest of the
conversation. A sample without a value is replaced by silence (NaN -> 0); an infinity is an
overflowed sample whose sign is still known, so it becomes full scale of that sign (+-inf ->
+-1), what clipping to the [-1, 1] range of PCM would make of it.
"""
from __future__ import annotations

import numpy as np

REPLACEMENT = "NaN -> 0, +-inf -> +-1"
"""How non-finite samples are replaced, in the words a log line uses."""


def finite_pcm(pcm: np.ndarray) -> tuple[np.ndarray, int]:
    """Floating-point `pcm` as the float32 the model hears, its non-finite samples replaced,
    and how many there were (a float64 sample past float32's range counts: it is infinite
    there). `pcm` itself when it is float32 and all finite; it is never changed. An array
    that is not floating point passes unchanged, for the caller's own check to name."""
    if not np.issubdtype(pcm.dtype, np.floating):
        return pcm, 0
    if pcm.dtype == np.float32 and np.isfinite(pcm).all():
        return pcm, 0
    out = np.empty(pcm.shape, np.float32)
    return out, finite_into(out, pcm)


def finite_into(out: np.ndarray, pcm: np.ndarray) -> int:
    """Floating-point `pcm` written into the float32 array `out` as finite_pcm makes it; returns
    how many samples were replaced. The frame path: written straight into the buffer the
    device reads, with no array in between."""
    if pcm.dtype == np.float32:
        np.copyto(out, pcm)
    else:
        with np.errstate(over="ignore"):
            np.copyto(out, pcm, casting="unsafe")
    finite = np.isfinite(out)
    if finite.all():
        return 0
    np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
    return int(out.size - np.count_nonzero(finite))
