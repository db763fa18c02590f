"""Per-frame, per-stage timing with CUDA events: no extra host synchronization in a frame.

The frame's wall time is measured on the host from the start of the step to the moment its
PCM is on the host (the deployment path); stage times come from events read after that.
"""
from __future__ import annotations

import contextlib
import time

import torch


class FrameTimer:
    def __init__(self, stages: list[str]):
        self.stages = stages
        self.records: list[dict[str, float]] = []
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._t0 = 0.0

    def begin(self) -> None:
        self._pending = []
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def stage(self, name: str):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        stop.record()
        self._pending.append((name, start, stop))

    def end(self) -> None:
        torch.cuda.synchronize()
        record = {name: 0.0 for name in self.stages}
        record["total"] = time.perf_counter() - self._t0
        for name, start, stop in self._pending:
            record[name] += start.elapsed_time(stop) / 1000.0
        self.records.append(record)
