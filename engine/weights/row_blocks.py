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
    whose first dimension is the rows, and other values (a group size) passed on as they are.

    Moving onto a GPU, the outputs are made before any block's temporaries, after torch's cache is
    emptied: each weight then gets memory of its own. Made after them, a weight is carved from the
    cached memory they freed, and the rest of that segment stays reserved as long as it lives (most
    of a GiB of an int4 MiniCPM-o process, docs/benchmarks.md)."""
    rows = max(1, block // max(1, w.shape[-1]))
    target = torch.device(device) if device is not None else w.device
    onto_gpu = device is not None and target.type == "cuda"

    def part(start: int, count: int = rows) -> Any:
        return quantize(w[start:start + count].to(device=target, dtype=dtype or w.dtype))

    if w.shape[0] <= rows and not onto_gpu:
        return part(0)
    kinds = part(0, 1)  # one row's results: the outputs' shapes past the rows, dtypes and other values
    if onto_gpu:
        torch.cuda.empty_cache()
    out = [torch.empty((w.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
           if isinstance(t, torch.Tensor) else t for t in kinds]
    kind, named = type(kinds), hasattr(kinds, "_fields")
    del kinds
    for start in range(0, w.shape[0], rows):
        done = part(start)
        for whole, piece in zip(out, done, strict=True):
            if isinstance(whole, torch.Tensor):
                whole[start:start + rows].copy_(piece)
        del done
    return kind(*out) if named else kind(out)
