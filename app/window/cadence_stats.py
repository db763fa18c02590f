"""The numbers behind the cadence panel: engine time per frame, and SPEAK time per second
of conversation (engine time spent producing that second's 12.5 frames, as the engine's
session measures it)."""
from __future__ import annotations

import numpy as np

from engine import FRAME_SECONDS as FRAME_S


class CadenceStats:
    def __init__(self, step_s: float = FRAME_S):
        """`step_s`: the model's step (80 ms; a once-a-second model's 1 s). A period that runs a
        step may take as long as the step: the audio waits meanwhile."""
        self.step_s = step_s
        self._frame_s = np.zeros(1024, dtype=np.float64)
        self.frames = 0
        self.seconds: list[float] = []
        self._stage_sums: dict[str, float] = {}  # the model's stages, as its frames' timings name them

    def add_frame(self, timings: dict) -> None:
        """A frame's engine timings in seconds: `total` and per stage."""
        if self.frames == len(self._frame_s):
            self._frame_s = np.concatenate([self._frame_s, np.zeros_like(self._frame_s)])
        self._frame_s[self.frames] = timings["total"]
        for stage, seconds in timings.items():
            if stage != "total":
                self._stage_sums[stage] = self._stage_sums.get(stage, 0.0) + seconds
        self.frames += 1

    def add_seconds(self, speak_s: list[float]) -> None:
        """SPEAK times of seconds the conversation has just completed."""
        self.seconds.extend(speak_s)

    @property
    def frame_times(self) -> np.ndarray:
        return self._frame_s[:self.frames]

    def stage_means(self) -> dict[str, float]:
        return {stage: total / max(1, self.frames) for stage, total in self._stage_sums.items()}

    def frame_mean(self) -> float:
        return float(self.frame_times.mean()) if self.frames else 0.0

    def frame_p99(self) -> float:
        return float(np.percentile(self.frame_times, 99)) if self.frames else 0.0

    def frame_overruns(self) -> int:
        """Periods that took longer than the model's step (an 80 ms model's: the 80 ms they cover)."""
        return int((self.frame_times > self.step_s).sum())

    def speak_mean(self) -> float:
        return float(np.mean(self.seconds)) if self.seconds else 0.0

    def speak_p99(self) -> float:
        return float(np.percentile(self.seconds, 99)) if self.seconds else 0.0

    def seconds_over(self) -> int:
        """Seconds whose SPEAK time exceeded the one-second cadence."""
        return sum(1 for s in self.seconds if s > 1.0)
