"""Per-frame, per-stage timing with CUDA events: no extra host synchronization in a frame.

The frame's wall time is measured on the host from the start of the step to the moment its
PCM is on the host (the deployment path); stage times come from events read after that.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np
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

    def summary(self, skip: int) -> dict[str, dict[str, float]]:
        """p50/p99/mean in milliseconds per stage, ignoring the first `skip` frames (warm-up, capture)."""
        kept = self.records[skip:]
        out = {}
        for key in [*self.stages, "total"]:
            values = np.array([r[key] for r in kept]) * 1000.0
            out[key] = {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99)),
                        "mean_ms": float(values.mean())}
        return out

    def speak_times(self, skip: int) -> list[float]:
        """Engine time spent on each full second (12.5 frames) of output, in seconds."""
        totals = np.array([r["total"] for r in self.records[skip:]])
        return [float(totals[round(s * 12.5):round((s + 1) * 12.5)].sum())
                for s in range(int(len(totals) / 12.5))]
