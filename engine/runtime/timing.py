"""Frame timing without extra synchronization, and SPEAK time per second of speech.

`FrameTimer` marks the end of each stage as it is queued: CUDA events on a GPU (read after
the frame's one sync), perf_counter on the CPU. The frame's total is host wall time from
`begin()` to `end()`, which the caller invokes once the frame's output is on the host (the
deployment path). The session and the benchmark's stock runtime use the same timer. Marks
are on the path to the frame's first launch, where the GPU waits for the host: `begin()`
records nothing, and the events are made once and recorded again every frame.
"""
from __future__ import annotations

import time

import torch

from ..period import FRAME_SIZE, SAMPLE_RATE


class FrameTimer:
    def __init__(self, device: torch.device | str, stages: tuple[str, ...] = ()):
        """`stages`: the names marked, in the order they run (the family's); each is reported,
        0 when not marked, and so is any other name marked."""
        self.cuda = torch.device(device).type == "cuda"
        self.stages = stages
        self._marks: list[tuple[str | None, object]] = []
        self._events: list[torch.cuda.Event] = []
        """Recorded again every frame: creating an event is a driver call the frame would wait on."""
        self.started = 0.0
        """perf_counter time the frame began."""

    def begin(self) -> None:
        """The frame's clock starts; the first stage's starts at the first mark."""
        self._marks = []
        self.started = time.perf_counter()

    def mark(self, stage: str | None) -> None:
        """`stage` ran since the previous mark; None only starts the clock for the next stage
        (work in between is not counted to any stage)."""
        if self.cuda:
            if len(self._marks) == len(self._events):
                self._events.append(torch.cuda.Event(enable_timing=True))
            event = self._events[len(self._marks)]
            event.record()
            self._marks.append((stage, event))
        else:
            self._marks.append((stage, time.perf_counter()))

    def end(self) -> dict[str, float]:
        """Seconds per stage, and the frame's host wall time as "total" (read first: reading
        the stages' times is the timer's own work). Call after the sync."""
        total = time.perf_counter() - self.started
        out = dict.fromkeys(self.stages, 0.0)
        for (_, a), (stage, b) in zip(self._marks, self._marks[1:]):
            if stage is not None:
                out[stage] = out.get(stage, 0.0) + (a.elapsed_time(b) / 1000 if self.cuda else b - a)
        out["total"] = total
        return out


class SpeakMeter:
    """Engine time spent per second of output audio: frames are cut at second boundaries
    (12.5 frames a second), a straddling frame's time split by its samples on each side."""

    def __init__(self, frame_size: int = FRAME_SIZE, sample_rate: int = SAMPLE_RATE):
        self.frame_size, self.sample_rate = frame_size, sample_rate
        self.seconds: list[float] = []
        self._spent, self._filled = 0.0, 0

    def add(self, seconds: float) -> list[float]:
        """One frame's engine time; returns the seconds of speech it completed (0 to 1 here)."""
        done = len(self.seconds)
        left, samples = seconds, self.frame_size
        while self._filled + samples >= self.sample_rate:
            take = self.sample_rate - self._filled
            share = left * take / samples
            self.seconds.append(self._spent + share)
            self._spent, self._filled = 0.0, 0
            left, samples = left - share, samples - take
        self._spent += left
        self._filled += samples
        return self.seconds[done:]
