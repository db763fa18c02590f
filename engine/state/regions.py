"""Declared streaming state: regions, the clocks that advance them, and what a store offers.

Every piece of streaming state in the engine (conv tails, transposed-conv partial sums, KV rings,
position counters, token delay lines) is declared as a `Region` by the module that uses it. Modules
never allocate state: a store built from the declarations owns every buffer, so the runtime can size
and place it (docs/architecture.md, "State and clocks"). A region's *clock* says how it advances: a
ring region appends `per_tick` entries each time its clock ticks and keeps the last `retain` of
them; a fixed region has a constant size. A clock is a name the regions declare (a model's step, its
codec's step, a mel frame: each family's docs list its own); the runtime knows only ``fixed``, which
never advances (conv tails, counters, delay lines, and any cache whose position restarts every
step). Clocks are ticked by the stage runner (engine.runtime.stages) and nowhere else, before the
stage that writes the new entries.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Protocol

import torch

FIXED = "fixed"
"""The clock of regions that never grow."""


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
    ahead: int = 0
    """Entries written ahead of the clock and not kept (a wake's predicted positions): backed,
    never counted as live."""
    reads_ahead: int = 0
    """Entries past the backed ones that a pass reads but never uses or writes (the masked keys of
    an attention span rounded up): a demand-sized store maps them to one shared granule of zeros
    on a device (engine.state.vmm) and keeps them zero on the host; they hold no memory."""

    def __post_init__(self):
        if not self.clock or not isinstance(self.clock, str):
            raise ValueError(f"region {self.name}: a clock is a name, not {self.clock!r}")
        if (self.clock == FIXED) != (self.retain is None):
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

    def backed_at(self, ticks: int) -> int:
        """Entries a demand-sized store backs after `ticks` ticks: the live ones and those ahead."""
        return min(self.entries_at(ticks) + self.ahead, self.retain)

    def readable_at(self, ticks: int) -> int:
        """Entries a pass may read after `ticks` ticks: the backed ones and the zeros read ahead."""
        return min(self.backed_at(ticks) + self.reads_ahead, self.retain)

    def full_shape(self, entries: int | None = None) -> tuple[int, ...]:
        if not self.is_ring:
            return self.shape
        return (self.retain if entries is None else entries, *self.shape)

    def entry_bytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()

    def bytes_at(self, ticks: int) -> int:
        """Bytes a demand-sized store needs after `ticks` ticks (a full store holds bytes_full())."""
        if not self.is_ring:
            return self.entry_bytes()
        return self.entries_at(ticks) * self.entry_bytes()

    def bytes_full(self) -> int:
        return self.bytes_at(self.retain or 1)


class Store(Protocol):
    """What every placement of declared state offers. Two implement it: `FullStore` (full
    retention, what stock runtimes do: engine.state.full) and `DemandStore` (memory follows
    the clocks, at stable addresses: engine.state.demand). Models only use `store[name]`; the runtime
    uses the rest."""

    regions: dict[str, Region]
    device: torch.device

    def __getitem__(self, name: str) -> torch.Tensor:
        """The region's tensor: the same object (and address) for the store's lifetime."""

    def __contains__(self, name: str) -> bool: ...

    def advance(self, clock: str, ticks: int = 1) -> None:
        """`clock` is about to tick `ticks` times: make room for the entries they write."""

    def ensure(self, ticks_by_clock: dict[str, int]) -> None:
        """Make room for at least the given absolute tick counts (used to copy state in)."""

    def ticks(self, name: str) -> int:
        """How far the clock of region `name` has ticked since the last reset."""

    def reset(self) -> None:
        """A new conversation: every region back to zeros, every clock to zero."""

    def restart(self, clock: str) -> None:
        """The regions of `clock` back to zeros and no entry held, the clock to zero: a cache whose
        positions start again within a conversation (a turn's); the other clocks go on."""

    def rewind(self, ticks_by_clock: dict[str, int]) -> None:
        """Every clock to the given count (zero where none is given), the entries written before it kept:
        no ring holds an entry past it (a demand-sized store unmaps them, a full one zeroes them). Fixed
        regions are left as they are: whoever rewinds writes them."""

    def nbytes(self, prefix: str = "") -> int:
        """Bytes held now by the regions whose names start with `prefix`."""

    def region_bytes(self) -> dict[str, int]:
        """Bytes each region holds now (what `nbytes` sums), by name."""

    def mapped_bytes(self) -> int:
        """Device bytes held outside torch's allocator (torch.cuda.memory_allocated misses them)."""

    def close(self) -> None:
        """Give back memory torch does not manage; the store is unusable after."""


def clocks_of(regions: Iterable[Region]) -> dict[str, int]:
    """Each clock the regions declare, at zero ticks."""
    return {r.clock: 0 for r in regions}


def declare(regions: Iterable[Region]) -> dict[str, Region]:
    """Regions by name; a name declared twice is a bug in the models."""
    out: dict[str, Region] = {}
    for r in regions:
        if r.name in out:
            raise ValueError(f"region {r.name} declared twice")
        out[r.name] = r
    return out


def copy_state(src: Store, dst: Store) -> None:
    """Move a conversation's state between two stores over the same regions (either
    placement, either way): clocks first, so the destination backs what the source holds,
    then every live entry."""
    ticks: dict[str, int] = {}
    for name, r in src.regions.items():
        if r.is_ring:
            ticks[r.clock] = max(ticks.get(r.clock, 0), src.ticks(name))
    dst.ensure(ticks)
    for name, r in src.regions.items():
        live = r.entries_at(src.ticks(name)) if r.is_ring else None
        dst[name][:live].copy_(src[name][:live])


@dataclasses.dataclass(frozen=True)
class SavedState:
    """A store's live entries and clocks at one moment (`save_state`), to go back to (`restore_state`)."""
    ticks: dict[str, int]
    entries: dict[str, torch.Tensor]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.entries.values())


def save_state(store: Store) -> SavedState:
    """A copy of every live entry and the clocks: a state many conversations (or turns) start from."""
    ticks = {r.clock: store.ticks(name) for name, r in store.regions.items()}
    return SavedState(ticks, {name: store[name][:r.entries_at(store.ticks(name)) if r.is_ring else None].clone()
                              for name, r in store.regions.items()})


def restore_state(store: Store, saved: SavedState) -> None:
    """The store as it was saved, at the same addresses (captured graphs stay valid): clocks rewound, then
    the saved entries copied in. A device-to-device copy, where computing the state again would take a pass."""
    store.rewind(saved.ticks)
    for name, entries in saved.entries.items():
        store[name][:entries.shape[0] if store.regions[name].is_ring else None].copy_(entries)
