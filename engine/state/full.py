"""The full-retention placement of declared state: every region at its full size, at once."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from .regions import Region, clocks_of, declare


class FullStore:
    """The full-retention placement: every region allocated at its full size, once. Its clock
    counts are kept so that state can move to a demand-sized store mid-conversation."""

    def __init__(self, regions: Iterable[Region], device: torch.device | str = "cpu"):
        self.regions = declare(regions)
        self.device = torch.device(device)
        self._buffers = {name: torch.zeros(r.full_shape(), dtype=r.dtype, device=self.device)
                         for name, r in self.regions.items()}
        self._ticks = clocks_of(self.regions.values())
        self._total = sum(b.numel() * b.element_size() for b in self._buffers.values())

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._buffers[name]

    def __contains__(self, name: str) -> bool:
        return name in self.regions

    def advance(self, clock: str, ticks: int = 1) -> None:
        self._ticks[clock] = self._ticks.get(clock, 0) + ticks  # a clock no region here declares counts too

    def ensure(self, ticks_by_clock: dict[str, int]) -> None:
        for clock, ticks in ticks_by_clock.items():
            self._ticks[clock] = max(self._ticks.get(clock, 0), ticks)

    def ticks(self, name: str) -> int:
        return self._ticks[self.regions[name].clock]

    def reset(self) -> None:
        for buf in self._buffers.values():
            buf.zero_()
        self._ticks = clocks_of(self.regions.values())

    def restart(self, clock: str) -> None:
        for name, region in self.regions.items():
            if region.clock == clock:
                self._buffers[name].zero_()
        self._ticks[clock] = 0

    def rewind(self, ticks_by_clock: dict[str, int]) -> None:
        self._ticks = {**clocks_of(self.regions.values()), **ticks_by_clock}
        for name, region in self.regions.items():
            if region.is_ring:
                self._buffers[name][region.entries_at(self._ticks[region.clock]):].zero_()

    def nbytes(self, prefix: str = "") -> int:
        if not prefix:  # asked every frame: full retention never changes its size
            return self._total
        return sum(b.numel() * b.element_size() for n, b in self._buffers.items() if n.startswith(prefix))

    def region_bytes(self) -> dict[str, int]:
        return {name: b.numel() * b.element_size() for name, b in self._buffers.items()}

    def mapped_bytes(self) -> int:
        return 0  # every buffer is a torch tensor

    def close(self) -> None:
        self._buffers.clear()
        self._total = 0
