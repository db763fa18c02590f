"""Rows of a table in page-locked host memory, read by a GPU kernel at a position the device holds.

A table a stream reads a little of at a time, at a place only the device knows (a counter that a
captured graph advances), cannot be looked up on the host first. Page-locked host memory is mapped
into the GPU's address space (unified addressing), so a kernel reads it over the bus where it lies:
the table takes no device memory, and one captured graph still serves every position. The copy is
exact: the same values as a lookup in a device table.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _wrapped(SRC, FIRST, OUT, n, rows, width, BLOCK: tl.constexpr):
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    start = (tl.load(FIRST) % rows) * width
    # Rows are contiguous, so row (first + i) % rows, column c is element (start + i * width + c) % (rows * width).
    tl.store(OUT + j, tl.load(SRC + (start + j) % (rows * width), mask=j < n), mask=j < n)


def wrapped_rows(table: torch.Tensor, first: torch.Tensor, count: int) -> torch.Tensor:
    """table[(first + i) % len(table)] for i < count, on first's device: `table` contiguous (in
    pinned host memory for a GPU), `first` a [1] int64 counter."""
    if not table.is_contiguous() or first.dtype != torch.int64 or first.numel() != 1:
        raise ValueError("wrapped_rows takes a contiguous table and a [1] int64 position")
    out = torch.empty((count, *table.shape[1:]), dtype=table.dtype, device=first.device)
    n = out.numel()
    if n:
        _wrapped[(triton.cdiv(n, BLOCK),)](table, first, out, n, table.shape[0], n // count, BLOCK=BLOCK)
    return out
