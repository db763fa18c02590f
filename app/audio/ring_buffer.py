"""A single-producer single-consumer ring of float32 samples between an audio callback and
the engine thread.

Audio callbacks run on PortAudio's real-time thread: they must not wait on a lock the
engine thread might hold, nor allocate sample buffers. The ring therefore keeps one
preallocated array and two monotonically increasing counters: only the writer advances
`_written`, only the reader advances `_read`, and each side publishes its counter after
copying the samples, so the other side never sees a half-written region. (Assigning a
Python attribute is atomic under the interpreter lock; no other synchronisation is needed.)
"""
from __future__ import annotations

import numpy as np


class SpscRing:
    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError(f"ring capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._buf = np.zeros(capacity, dtype=np.float32)
        self._written = 0
        self._read = 0

    def available(self) -> int:
        """Samples the reader can take now."""
        return self._written - self._read

    def free(self) -> int:
        """Samples the writer can put now."""
        return self.capacity - (self._written - self._read)

    def write(self, samples: np.ndarray) -> int:
        """Writer side: copy as many samples as fit; returns how many were taken."""
        n = min(len(samples), self.free())
        start = self._written % self.capacity
        first = min(n, self.capacity - start)
        self._buf[start:start + first] = samples[:first]
        self._buf[:n - first] = samples[first:n]
        self._written += n
        return n

    def read_into(self, out: np.ndarray) -> int:
        """Reader side: fill `out` from the oldest samples; returns how many were copied."""
        n = min(len(out), self.available())
        start = self._read % self.capacity
        first = min(n, self.capacity - start)
        out[:first] = self._buf[start:start + first]
        out[first:n] = self._buf[:n - first]
        self._read += n
        return n

    def skip(self) -> int:
        """Reader side: drop every sample waiting; returns how many."""
        n = self.available()
        self._read += n
        return n
