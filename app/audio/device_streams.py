"""The microphone's and the speaker's PortAudio streams as a conversation keeps them: each one
opened on a device, watched from the engine thread, and opened again on another device while
the conversation goes on (a choice made in Audio, a device unplugged or back, a microphone
that stalled). A direction has one stream at a time: the old one is closed before the next
opens, so the ring its callback fills keeps a single producer."""
from __future__ import annotations

import threading
import time

import numpy as np

from engine import SAMPLE_RATE as ENGINE_RATE

from . import audio_devices
from .audio_devices import AudioDevice, sd

WHAT = {"input": "microphone", "output": "speaker"}


class AudioDeviceError(RuntimeError):
    """A device could not be opened or stopped working; the message is for the user."""


class StreamWatch:
    """Decides, from the engine thread, whether a stream's callbacks still come. Sound
    servers may pause a new stream for a moment while they set it up, so stalls only count
    after a start-up grace period."""

    def __init__(self, what: str, name: str, config):  # config: the link's AudioConfig
        self.what, self.name, self.config = what, name, config
        self.calls = 0          # advanced by the callback
        self.finished = False   # set by PortAudio's finished callback
        self.retired = False    # closed on purpose: its end is no failure
        self._started_at = self._seen_at = time.monotonic()
        self._seen_calls = 0

    def arm(self) -> None:
        self._started_at = self._seen_at = time.monotonic()

    def on_finished(self) -> None:
        self.finished = not self.retired

    def problem(self, now: float) -> str | None:
        if self.finished:
            return f"The {self.what} stopped: “{self.name}” was disconnected or failed."
        if self.calls != self._seen_calls:
            self._seen_calls, self._seen_at = self.calls, now
            return None
        if now - self._started_at < self.config.start_timeout_s:
            return None
        if self._seen_calls == 0:
            return (f"The {self.what} did not start within {self.config.start_timeout_s:.0f} s: "
                    f"“{self.name}” is busy, suspended or gone.")
        if now - self._seen_at > self.config.stall_timeout_s:
            return (f"The {self.what} stopped for more than {self.config.stall_timeout_s:.1f} s: "
                    f"“{self.name}” was suspended, disconnected or failed.")
        return None


class DeviceStream:
    """One direction's stream. `open`, `start` and `problem` from the engine thread (or
    before it runs); `close` from any thread, `close(for_good=True)` once the link closes."""

    def __init__(self, kind: str, config, callback):
        self.kind, self.what, self.config = kind, WHAT[kind], config
        self.device: AudioDevice | None = None  # the one open, or last open
        self.watch: StreamWatch | None = None
        self._callback = callback
        self._stream = None
        self._lock = threading.Lock()
        self._ended = False

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    def open(self, device: AudioDevice, rate: int) -> None:
        watch = StreamWatch(self.what, device.name, self.config)
        kind = sd.InputStream if self.kind == "input" else sd.OutputStream
        try:
            with audio_devices.opening(device):
                stream = kind(device=device.index, samplerate=rate, channels=1, dtype="float32",
                              latency=self.config.device_latency, callback=self._callback,
                              finished_callback=watch.on_finished)
        except (sd.PortAudioError, ValueError) as exc:
            raise AudioDeviceError(f"Could not open the {self.what} “{device.name}”: {exc}") from None
        with self._lock:
            if not self._ended:
                self._stream, self.watch, self.device = stream, watch, device
                return
        stream.close(ignore_errors=True)  # the link closed meanwhile

    def start(self) -> None:
        if self._stream is None:
            return
        self.watch.arm()
        try:
            self._stream.start()
        except sd.PortAudioError as exc:
            self.close()
            raise AudioDeviceError(f"Could not start the {self.what} “{self.device.name}”: {exc}") from None

    def close(self, for_good: bool = False) -> None:
        """Abort (queued audio is not played out) and release the stream. Idempotent."""
        with self._lock:
            stream, self._stream = self._stream, None
            self._ended = self._ended or for_good
            if stream is not None:
                self.watch.retired = True
        if stream is None:
            return
        try:
            stream.abort()
        except sd.PortAudioError:
            pass  # the device is already gone; closing still releases the stream
        finally:
            stream.close(ignore_errors=True)

    def problem(self, now: float) -> str | None:
        return None if self._stream is None else self.watch.problem(now)

    def now(self) -> float | None:
        """PortAudio's clock (the one its callbacks' times are on), while the stream is open."""
        stream = self._stream
        try:
            return None if stream is None else float(stream.time)
        except sd.PortAudioError:
            return None


class Silence:
    """What the model hears while it has no microphone: silence at the engine's rate, as
    fast as real time passes."""

    def __init__(self):
        self._since = time.monotonic()
        self._given = 0

    def due(self) -> np.ndarray:
        owed = int((time.monotonic() - self._since) * ENGINE_RATE) - self._given
        self._given += max(0, owed)
        return np.zeros(max(0, owed), dtype=np.float32)


def fill_gap(ring, zeros: np.ndarray, samples: int) -> int:
    """Callback thread: `samples` of silence into `ring` from a preallocated `zeros` (no
    allocation); returns how many the full ring refused."""
    refused = 0
    while samples > 0:
        n = min(samples, len(zeros))
        refused += n - ring.write(zeros[:n])
        samples -= n
    return refused
