"""A product's depth split over programs, summed without a second launch and without atomics
on the data: each program stores its fp32 partial sum and counts itself in at the output tile's
arrival counter; the program that arrives last adds the partials up in split order and finishes
the tile. Which program finishes a tile depends on timing, the order of the sum does not, so
the bits never depend on which program finished first. Shared by the many-row products
(rows_kernels), SEANet's convolutions (stream_conv) and ring attention's merge.

The counters are int32 zeros at a fixed address, one block of them per device and stream
(`counters`): the last program of a tile sets its counter back to zero, so every launch, eager
or replayed in a graph, finds them as the one before left them. Kernels queued on one stream
run one after another (an overlapped launch waits for the kernel before it before it touches
memory: overlap.py), so they may share the block.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

COUNTERS = 4096
"""Arrival counters a launch may use: output tiles of a split product, or heads x queries of
ring attention (at most 32 x 32)."""

_counters: dict[tuple[torch.device, int], torch.Tensor] = {}


def counters(device: torch.device, slots: int) -> torch.Tensor:
    """The arrival counters for a launch queued now on `device`'s current stream (zero when no
    kernel is running on it), created zero on first use. Created inside a graph's capture, the
    zeroing would be a memset in that graph alone, and another graph captured on the stream and
    replayed before it would count from whatever the memory held: a family whose graphs replay in
    another order than they were captured makes them first (`ready`, on the capture stream). A lone
    graph captured by other code (a benchmark's) zeroes them itself, first, as its replay begins."""
    if slots > COUNTERS:
        raise ValueError(f"split sums: {slots} output tiles, at most {COUNTERS}")
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream)
    block = _counters.get(key)
    if block is None:
        block = _counters[key] = torch.zeros(COUNTERS, dtype=torch.int32, device=device)
    return block


def ready(device: torch.device) -> None:
    """The current stream's counters made now, outside any capture (see `counters`), and zero before
    this returns: graphs captured on the stream replay on another."""
    counters(device, 0)
    torch.cuda.current_stream(device).synchronize()


@triton.jit
def arrived_last(COUNT, SPLIT: tl.constexpr):
    """Counts this program in at COUNT, once its stores are made: True in the SPLIT-th program to
    arrive there, which then sees every other's stores (read them with `added`) and has set the
    counter back to zero. The barrier and the release make each thread's stores visible before
    the count; the acquire makes the last program's loads see them (CUTLASS's split-K
    semaphore does the same)."""
    tl.debug_barrier()
    last = tl.atomic_add(COUNT, 1, sem="acq_rel", scope="gpu") == SPLIT - 1
    tl.store(COUNT, 0, mask=last)
    return last


@triton.jit
def added(work, sw_s, mask, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
    """The [BM, BN] sum of the SPLIT partials at work + s * sw_s, in split order (from L2: other
    programs stored them during this kernel)."""
    acc = tl.zeros([BM, BN], tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(work + s * sw_s, mask=mask, other=0.0, cache_modifier=".cg")
    return acc
