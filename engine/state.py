"""Declared streaming state: regions and the clocks that advance them.

Every piece of streaming state in the engine (conv tails, transposed-conv partial
sums, KV rings, position counters, token delay lines) is declared as a `Region`
by the module that uses it. Modules never allocate state themselves: a
`StateStore` built from the declarations owns every buffer, so the runtime can
size and place them (DESIGN.md section 2).

A region's *clock* says how it advances: a ring region appends `per_tick`
entries each time its clock ticks and keeps the last `retain` of them; a fixed
region has a constant size whatever the clock says. Clocks:

- ``frame``     one tick per 80 ms frame (12.5 Hz): LM temporal KV, delay lines;
- ``mimi_step`` one tick per 40 ms codec transformer step (25 Hz);
- ``codebook``  one tick per depformer step; restarts every frame;
- ``fixed``     never advances (conv tails, counters).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable

import torch

CLOCKS = ("frame", "mimi_step", "codebook", "fixed")


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    shape: tuple[int, ...]
    """Fixed regions: the whole buffer. Ring regions: one entry (the step axis is
    prepended, so growth only ever appends memory at the end of the range)."""
    dtype: torch.dtype = torch.float32
    clock: str = "fixed"
    retain: int | None = None
    """Ring capacity in entries (None for fixed regions)."""
    per_tick: int = 1
    restarts_each: str | None = None
    """A coarser clock whose tick empties this region (the depformer KV restarts each frame)."""

    def __post_init__(self):
        if self.clock not in CLOCKS:
            raise ValueError(f"region {self.name}: unknown clock {self.clock!r}")
        if (self.clock == "fixed") != (self.retain is None):
            raise ValueError(f"region {self.name}: ring regions need retain, fixed ones must not have it")
        if self.retain is not None and self.retain <= 0:
            raise ValueError(f"region {self.name}: retain must be positive")

    @property
    def is_ring(self) -> bool:
        return self.retain is not None

    def entries_at(self, ticks: int) -> int:
        """Entries holding live data after `ticks` ticks of the region's clock."""
        if not self.is_ring:
            return 1
        return min(ticks * self.per_tick, self.retain)

    def full_shape(self, entries: int | None = None) -> tuple[int, ...]:
        if not self.is_ring:
            return self.shape
        return (self.retain if entries is None else entries, *self.shape)

    def entry_bytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()

    def bytes_at(self, ticks: int) -> int:
        """Bytes a demand-sized store needs after `ticks` ticks (stock stores hold bytes_at(inf))."""
        if not self.is_ring:
            return self.entry_bytes()
        return self.entries_at(ticks) * self.entry_bytes()

    def bytes_full(self) -> int:
        return self.bytes_at(self.retain or 1)


class StateStore:
    """Owns the buffers of a set of declared regions, allocated at full retention.

    This is the plain placement (what stock runtimes do); the DuplexCadence runtime's
    `engine.runtime.DemandStore` has the same interface and backs rings on demand. Both
    count their clocks' ticks (`advance` is called before the step that writes them), so
    state can move from one placement to the other (`copy_state`).
    """

    def __init__(self, regions: Iterable[Region], device: torch.device | str = "cpu"):
        self.regions: dict[str, Region] = {}
        for r in regions:
            if r.name in self.regions:
                raise ValueError(f"region {r.name} declared twice")
            self.regions[r.name] = r
        self.device = torch.device(device)
        self._buffers = {
            name: torch.zeros(r.full_shape(), dtype=r.dtype, device=self.device)
            for name, r in self.regions.items()
        }
        self._clock_ticks = dict.fromkeys(CLOCKS, 0)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._buffers[name]

    def __contains__(self, name: str) -> bool:
        return name in self._buffers

    def advance(self, clock: str, ticks: int = 1) -> None:
        self._clock_ticks[clock] += ticks

    def ensure(self, ticks_by_clock: dict[str, int]) -> None:
        for clock, ticks in ticks_by_clock.items():
            self._clock_ticks[clock] = max(self._clock_ticks[clock], ticks)

    def ticks(self, name: str) -> int:
        return self._clock_ticks[self.regions[name].clock]

    def reset(self) -> None:
        for buf in self._buffers.values():
            buf.zero_()
        self._clock_ticks = dict.fromkeys(CLOCKS, 0)


    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def mapped_bytes(self) -> int:
        """Bytes held outside torch's allocator (none here: every buffer is a torch tensor)."""
        return 0


def copy_state(src, dst) -> None:
    """Move a conversation's state between two stores over the same regions (a plain
    StateStore and a DemandStore, either way): clocks first, so the destination backs what
    the source holds, then every live entry."""
    ticks: dict[str, int] = {}
    for name, r in src.regions.items():
        if r.is_ring and r.restarts_each is None:
            ticks[r.clock] = max(ticks.get(r.clock, 0), src.ticks(name))
    dst.ensure(ticks)
    for name, r in src.regions.items():
        if r.is_ring and r.restarts_each is None:
            live = r.entries_at(src.ticks(name))
            dst[name][:live].copy_(src[name][:live])
        else:
            dst[name].copy_(src[name])
