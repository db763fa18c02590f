"""Demand-sized placement of declared state: memory follows the regions' clocks.

In `DemandStore` (an `engine.state.Store`) a ring region is backed for `region.backed_at(ticks)`
entries (the live ones and those a wake writes ahead; those a pass only reads ahead read zeros that
hold no memory); the stage runner calls `advance` before the stage that writes the new entries,
outside graph capture. Fixed regions (conv tails, counters, delay lines, the depformer's KV) are
allocated whole, once. Rings on CUDA reserve their full address range once and map 2 MiB granules
into it on demand (vmm.VmmBuffer): the tensor never moves, so captured CUDA graphs stay valid as it
grows. On CPU (no graphs) a test emulation allocates full size, `nbytes()` counts backed entries
only, and unbacked ones are poisoned (NaN, or an integer dtype's minimum) so reading what a CUDA
store would not have mapped goes visibly wrong; newly backed ones read as zeros.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from .regions import Region, clocks_of, declare
from .vmm import VmmBuffer


def _poison(t: torch.Tensor) -> None:
    t.fill_(float("nan") if t.dtype.is_floating_point else torch.iinfo(t.dtype).min)


class _HostRing:
    """CPU emulation of a demand-backed ring (see module docstring)."""

    def __init__(self, region: Region, device: torch.device):
        self.entry_bytes = region.entry_bytes()
        self.tensor = torch.empty(region.full_shape(), dtype=region.dtype, device=device)
        _poison(self.tensor)
        self.backed = self.readable = 0

    def back(self, entries: int, readable: int = 0) -> None:
        if entries > self.backed:
            self.tensor[self.backed:entries].zero_()
            self.backed = entries
        if readable > max(self.readable, self.backed):  # read ahead: zeros, as the device's shared granule
            self.tensor[max(self.readable, self.backed):readable].zero_()
        self.readable = max(self.readable, readable, self.backed)

    def release(self) -> None:
        _poison(self.tensor)
        self.backed = self.readable = 0

    def rewind(self, entries: int, readable: int = 0) -> None:
        if entries < self.backed:
            _poison(self.tensor[entries:])
            self.backed = self.readable = entries
        self.back(entries, readable)

    def nbytes(self) -> int:
        return self.backed * self.entry_bytes

    def close(self) -> None:
        pass


class _DeviceRing:
    """A ring backed through CUDA VMM at a stable address."""

    def __init__(self, region: Region, device: torch.device):
        self.entry_bytes = region.entry_bytes()
        self.buffer = VmmBuffer(region.bytes_full(), device)
        self.tensor = self.buffer.as_tensor(region.dtype, region.full_shape())
        self.backed = 0

    def back(self, entries: int, readable: int = 0) -> None:
        if entries > self.backed or readable * self.entry_bytes > self.buffer.readable_bytes:
            self.buffer.ensure(entries * self.entry_bytes, readable * self.entry_bytes)
        if entries > self.backed:
            self.tensor[self.backed:entries].zero_()  # a kept granule's rest holds what was there before
            self.backed = entries

    def release(self) -> None:
        self.buffer.shrink(0)
        self.backed = 0

    def rewind(self, entries: int, readable: int = 0) -> None:
        """Back exactly `entries`: those past them unmapped (a kept granule's rest is zeroed when backed again)."""
        if entries < self.backed:
            self.buffer.shrink(entries * self.entry_bytes)
            self.backed = entries
        self.back(entries, readable)

    def nbytes(self) -> int:
        return self.buffer.mapped_bytes

    def close(self) -> None:
        self.buffer.close()


class DemandStore:
    def __init__(self, regions: Iterable[Region], device: torch.device | str = "cpu"):
        self.regions = declare(regions)
        self.device = torch.device(device)
        ring_kind = _DeviceRing if self.device.type == "cuda" else _HostRing
        self._whole: dict[str, torch.Tensor] = {}
        self._rings: dict[str, _HostRing | _DeviceRing] = {}
        for name, r in self.regions.items():
            if r.is_ring:
                self._rings[name] = ring_kind(r, self.device)
                self._rings[name].back(r.backed_at(0), r.readable_at(0))
            else:
                self._whole[name] = torch.zeros(r.full_shape(), dtype=r.dtype, device=self.device)
        self._ticks = clocks_of(self.regions.values())

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._rings[name].tensor if name in self._rings else self._whole[name]

    def __contains__(self, name: str) -> bool:
        return name in self.regions

    def advance(self, clock: str, ticks: int = 1) -> None:
        self._ticks[clock] = self._ticks.get(clock, 0) + ticks  # a clock no region here declares counts too
        self._back(clock)

    def ensure(self, ticks_by_clock: dict[str, int]) -> None:
        for clock, ticks in ticks_by_clock.items():
            if ticks > self._ticks.get(clock, 0):
                self._ticks[clock] = ticks
                self._back(clock)

    def ticks(self, name: str) -> int:
        return self._ticks[self.regions[name].clock]

    def reset(self) -> None:
        """Zero the whole regions; return every ring to no backed entry."""
        for buf in self._whole.values():
            buf.zero_()
        for ring in self._rings.values():
            ring.release()
        self._ticks = clocks_of(self.regions.values())

    def restart(self, clock: str) -> None:
        for name, ring in self._rings.items():
            if self.regions[name].clock == clock:
                ring.release()
        self._ticks[clock] = 0

    def rewind(self, ticks_by_clock: dict[str, int]) -> None:
        self._ticks = {**clocks_of(self.regions.values()), **ticks_by_clock}
        for name, ring in self._rings.items():
            region = self.regions[name]
            ticks = self._ticks[region.clock]
            ring.rewind(region.backed_at(ticks), region.readable_at(ticks))

    def nbytes(self, prefix: str = "") -> int:
        """CUDA rings count their mapped granules, CPU rings their backed entries."""
        whole = sum(b.numel() * b.element_size() for n, b in self._whole.items() if n.startswith(prefix))
        return whole + sum(ring.nbytes() for n, ring in self._rings.items() if n.startswith(prefix))

    def region_bytes(self) -> dict[str, int]:
        held = {name: buf.numel() * buf.element_size() for name, buf in self._whole.items()}
        return held | {name: ring.nbytes() for name, ring in self._rings.items()}

    def mapped_bytes(self) -> int:
        return sum(ring.nbytes() for ring in self._rings.values() if isinstance(ring, _DeviceRing))

    def reserved_bytes(self) -> int:
        """Bytes a full-retention FullStore would hold for the same regions."""
        return sum(r.bytes_full() for r in self.regions.values())

    def close(self) -> None:
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()
        self._whole.clear()

    def _back(self, clock: str) -> None:
        for name, ring in self._rings.items():
            region = self.regions[name]
            if region.clock == clock:
                ring.back(region.backed_at(self._ticks[clock]), region.readable_at(self._ticks[clock]))
