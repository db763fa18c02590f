"""A download's progress, taken from the Hugging Face client's own progress hook (its
`tqdm_class`), which both its plain HTTP path and its Xet path report through."""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable

SPEED_WINDOW_S = 5.0
"""Speed is measured over the last few seconds: a connection's rate changes, and a stall
should show as one soon."""


class DownloadCancelled(Exception):
    """The user cancelled; the files already complete stay in the cache."""


@dataclasses.dataclass(frozen=True)
class Progress:
    repo: str
    file: str
    done_bytes: int
    total_bytes: int
    speed: float
    """Bytes per second over the last few seconds (0 until measured)."""

    @property
    def eta_s(self) -> float | None:
        return (self.total_bytes - self.done_bytes) / self.speed if self.speed > 0 else None

    def describe(self) -> str:
        """"3.1 GB of 15.6 GB · 48 MB/s · 4 min 20 s left"."""
        parts = [f"{size_text(self.done_bytes)} of {size_text(self.total_bytes)}"]
        if self.speed > 0:
            parts.append(f"{size_text(self.speed)}/s")
            parts.append(f"{duration_text(self.eta_s)} left")
        return " · ".join(parts)


def size_text(n: float) -> str:
    """Decimal units, as the Hub and disk tools show sizes."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def duration_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class ProgressMeter:
    """Counts the bytes of one model's download across its files and reports them; raises
    DownloadCancelled from inside the client's transfer once `cancel` is set."""

    def __init__(self, repo: str, total_bytes: int, report: Callable[[Progress], None], cancel: threading.Event,
                 clock: Callable[[], float] = time.monotonic):
        self.repo, self.total, self.report, self.cancel, self.clock = repo, total_bytes, report, cancel, clock
        self.file = ""
        self.done = 0
        self._file_done = 0
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def start_file(self, name: str) -> None:
        self.file, self._file_done = name, 0
        self.check_cancelled()
        self._emit()

    def finish_file(self, size: int) -> None:
        """The file is in the cache: count all of it, also what the client found there already."""
        with self._lock:
            self.done += size - self._file_done
            self._file_done = size
        self._emit()

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            self._file_done += n
        self.check_cancelled()
        self._emit()

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise DownloadCancelled(f"{self.repo}: download cancelled")

    def progress(self) -> Progress:
        return Progress(self.repo, self.file, self.done, self.total, self._speed())

    def _speed(self) -> float:
        now = self.clock()
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 - t0 >= 0.5 else 0.0

    def _emit(self) -> None:
        self.report(self.progress())

    def hook(self) -> type:
        """A class the client takes as `tqdm_class`: it builds one per file (HTTP) or per
        transfer (Xet) and calls `update` with the bytes written; bytes read off the network
        (`update_transfer`) are not counted twice."""
        meter = self

        class Hook:
            def __init__(self, *args, initial: int = 0, **kwargs):
                # A resumed file starts at `initial` bytes already on disk.
                if initial:
                    meter.add(initial)

            def update(self, n: float | None = 1) -> None:
                if n:
                    meter.add(int(n))

            def update_transfer(self, n: float | None = 1) -> None:
                meter.check_cancelled()

            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                pass

            def close(self) -> None:
                pass

            def refresh(self, *args, **kwargs) -> None:
                pass

            def set_postfix_str(self, *args, **kwargs) -> None:
                pass

            def set_transfer_postfix_str(self, *args, **kwargs) -> None:
                pass

            def set_description(self, *args, **kwargs) -> None:
                pass

            set_description_str = set_description

        return Hook
