"""A product's depth split over programs: each stores its fp32 partial sum, and a second launch
adds them up in split order, so the result's bits never depend on which program finished first
(no atomics). Shared by the many-row products (rows_kernels) and SEANet's convolutions
(stream_conv)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def added(work, sw_s, mask, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
    """The [BM, BN] sum of the SPLIT partials at work + s * sw_s, in split order."""
    acc = tl.zeros([BM, BN], tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(work + s * sw_s, mask=mask, other=0.0)
    return acc
