"""Quantizing a weight a block of rows at a time. Every quantizer here works on rows alone (a row's
scale, a group's search), so the blocks give the same bits as the whole, while the float32
temporaries of a search (int4's holds about eight copies of its input) cover one block rather
than the tensor: quantized whole, Qwen3-8B's head (621 M weights, 2.5 GB in float32) needed
about eight times that on the device for a moment, more than the card an int4 model is for.
Given a device, each block moves there as it is quantized, so the float source never sits on it
whole either."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

BLOCK_ELEMENTS = 1 << 23
"""Weights a block holds at most (8 M: 32 MB in float32)."""


def in_row_blocks(quantize: Callable[[torch.Tensor], Any], w: torch.Tensor, device: torch.device | None = None,
                  dtype: torch.dtype | None = None, block: int = BLOCK_ELEMENTS):
    """`quantize(w)` for w [N, K], computed on blocks of rows (each moved to `device` in `dtype` first,
    where given) into outputs made once. `quantize` returns a tuple (or a NamedTuple) of tensors
    whose first dimension is the rows, and other values (a group size) passed on as they are."""
    rows = max(1, block // max(1, w.shape[-1]))

    def part(start: int) -> Any:
        return quantize(w[start:start + rows].to(device=device or w.device, dtype=dtype or w.dtype))

    first = part(0)
    if w.shape[0] <= rows:
        return first
    out = [torch.empty((w.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
           if isinstance(t, torch.Tensor) else t for t in first]
    for start in range(0, w.shape[0], rows):
        done = first if start == 0 else part(start)
        for whole, piece in zip(out, done, strict=True):
            if isinstance(whole, torch.Tensor):
                whole[start:start + rows].copy_(piece)
        del done
    return type(first)(*out) if hasattr(first, "_fields") else type(first)(out)
