"""Microphone and speaker streams, converted to and from the engine's 24 kHz frames.

Each device runs at its own rate. PortAudio's callbacks only move samples between the
device and a preallocated ring (no allocation, lock, logging or torch there); the engine
thread does everything else: echo cancellation (app.echo_cancel: the speaker callback also
keeps what it played, the far end), streaming resampling with soxr, cutting 80 ms frames,
bounding latency, the speaker's volume, and watching that both streams are still alive.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import soxr

from engine import FRAME_SIZE
from engine import SAMPLE_RATE as ENGINE_RATE

from . import audio_devices
from .audio_devices import AudioDevice, sd
from .echo_cancel import APM_RATE, EchoCanceller, EchoSettings, EchoState, ForecastStream
from .ring_buffer import SpscRing


class AudioDeviceError(RuntimeError):
    """A device could not be opened or stopped working; the message is for the user."""


@dataclass(frozen=True)
class AudioConfig:
    prebuffer_s: float = 0.12          # speaker waits for this much audio before playing
    max_input_backlog_s: float = 0.32  # older microphone audio is dropped beyond this
    input_capacity_s: float = 1.0
    output_capacity_s: float = 0.5
    # Device buffer, seconds: Python callbacks on a busy machine miss the deadlines of
    # PortAudio's "low" setting and the device glitches.
    device_latency: float = 0.05
    stall_timeout_s: float = 1.0       # a running stream silent this long has failed
    start_timeout_s: float = 4.0       # grace while a sound server sets a stream up


@dataclass(frozen=True)
class AudioCounters:
    input_overflows: int      # microphone audio lost before the engine thread saw it
    output_underflows: int    # the speaker ran dry while playing
    dropped_input_s: float    # microphone audio dropped to keep latency bounded
    dropped_output_s: float   # model audio that did not fit the speaker queue
    input_backlog_s: float    # microphone audio waiting when the engine took its last frame


def echo_batch_due(echo: EchoCanceller, resampler: ForecastStream, pending: int, available: int) -> bool:
    """With echo cancellation on, the microphone's audio waits in its ring until it could
    complete the next frame: the canceller then runs about once a frame instead of at every
    poll, each call starting with cold caches. The resamplers give their output in blocks (the
    48-to-24 kHz one 35 ms at a time), so whether a call would complete the frame is forecast
    from what each holds (`pending`: engine-rate samples waiting; `available`: the ring's);
    the forecast never falls short, so no frame waits longer than with a call at every poll."""
    missing = FRAME_SIZE - pending
    return missing <= 0 or resampler.most(echo.most_out(available)) >= missing


class _StreamWatch:
    """Decides, from the engine thread, whether a stream's callbacks still come. Sound
    servers may pause a new stream for a moment while they set it up, so stalls only count
    after a start-up grace period."""

    def __init__(self, label: str, config: AudioConfig):
        self.label = label
        self.config = config
        self.calls = 0          # advanced by the callback
        self.finished = False   # set by PortAudio's finished callback
        self._started_at = self._seen_at = time.monotonic()
        self._seen_calls = 0

    def arm(self) -> None:
        self._started_at = self._seen_at = time.monotonic()

    def problem(self, now: float) -> str | None:
        if self.finished:
            return f"The {self.label} stream stopped: the device was disconnected or failed."
        if self.calls != self._seen_calls:
            self._seen_calls, self._seen_at = self.calls, now
            return None
        if now - self._started_at < self.config.start_timeout_s:
            return None
        if self._seen_calls == 0:
            return f"The {self.label} did not start within {self.config.start_timeout_s:.0f} s."
        if now - self._seen_at > self.config.stall_timeout_s:
            return (f"The {self.label} stopped for more than {self.config.stall_timeout_s:.1f} s: "
                    "the device was suspended, disconnected or failed.")
        return None


class AudioLink:
    """An opened microphone + speaker pair. `start()`, then from one engine thread:
    `read_frame()` / `write_frame()` / `problem()` / `counters()`; `close()` from anywhere."""

    def __init__(self, microphone: AudioDevice, speaker: AudioDevice,
                 config: AudioConfig = AudioConfig(), echo: EchoSettings | None = None):
        if sd is None:
            raise AudioDeviceError("No audio system is available on this machine.")
        self.config = config
        self.description = f"{microphone.name} → engine → {speaker.name}"
        in_rate, out_rate = microphone.sample_rate, speaker.sample_rate
        self._in_ring = SpscRing(int(in_rate * config.input_capacity_s))
        self._out_ring = SpscRing(int(out_rate * config.output_capacity_s))
        self._in_scratch = np.zeros(self._in_ring.capacity, dtype=np.float32)
        self._in_resampler = soxr.ResampleStream(in_rate, ENGINE_RATE, 1, dtype="float32")
        # Echo cancellation: what the speaker played, beside what the microphone captured,
        # each with its first sample's PortAudio time (set by the callbacks).
        self._played_ring = SpscRing(self._out_ring.capacity * 2)
        self._played_scratch = np.zeros(self._played_ring.capacity, dtype=np.float32)
        self._mic_t0: float | None = None
        self._speaker_t0: float | None = None
        self._echo: EchoCanceller | None = None
        self._echo_resampler: ForecastStream | None = None
        self._echo_wanted: EchoSettings | None = echo or EchoSettings()  # applied by the engine thread
        self._gain = 1.0  # the speaker's volume (0 when muted): what is played is what the canceller hears
        self._output_dbfs = -120.0
        self._out_resampler = soxr.ResampleStream(ENGINE_RATE, out_rate, 1, dtype="float32")
        self._pending = np.zeros(0, dtype=np.float32)  # engine-rate audio not yet framed
        self._backlog_s = 0.0  # waiting microphone audio when the engine last looked
        self._prebuffer = int(out_rate * config.prebuffer_s)
        self._priming = True
        self._in_rate, self._out_rate = in_rate, out_rate
        self._mic = _StreamWatch("microphone", config)
        self._speaker = _StreamWatch("speaker", config)
        self._ring_overflows = self._pa_overflows = 0
        self._ring_underflows = self._pa_underflows = 0
        self._dropped_in = self._dropped_out = 0
        self._close_lock = threading.Lock()
        self._closed = False
        self._streams = []
        try:
            with audio_devices.opening(microphone):
                self._streams.append(sd.InputStream(
                    device=microphone.index, samplerate=in_rate, channels=1, dtype="float32",
                    latency=config.device_latency, callback=self._on_input,
                    finished_callback=self._on_input_finished))
            with audio_devices.opening(speaker):
                self._streams.append(sd.OutputStream(
                    device=speaker.index, samplerate=out_rate, channels=1, dtype="float32",
                    latency=config.device_latency, callback=self._on_output,
                    finished_callback=self._on_output_finished))
        except (sd.PortAudioError, ValueError) as exc:
            self.close()
            raise AudioDeviceError(f"Could not open the audio devices "
                                   f"({microphone.name} / {speaker.name}): {exc}") from None

    # --- PortAudio's real-time thread -------------------------------------------------
    def _on_input(self, indata, frames, time_info, status):
        if self._mic_t0 is None:
            self._mic_t0 = time_info.inputBufferAdcTime or time_info.currentTime
        self._mic.calls += 1
        if status.input_overflow:
            self._pa_overflows += 1
        if self._in_ring.write(indata[:, 0]) < frames:
            self._ring_overflows += 1

    def _on_output(self, outdata, frames, time_info, status):
        self._speaker.calls += 1
        if status.output_underflow:
            self._pa_underflows += 1
        if self._speaker_t0 is None:
            self._speaker_t0 = time_info.outputBufferDacTime or time_info.currentTime
        if self._priming and self._out_ring.available() < self._prebuffer:
            outdata.fill(0)
        else:
            self._priming = False
            n = self._out_ring.read_into(outdata[:, 0])
            if n < frames:
                outdata[n:] = 0
                self._ring_underflows += 1
                self._priming = True
        self._played_ring.write(outdata[:, 0])  # silence too: the far end's timeline is the device's

    def _on_input_finished(self):
        self._mic.finished = not self._closed

    def _on_output_finished(self):
        self._speaker.finished = not self._closed

    # --- the engine thread --------------------------------------------------------------
    def start(self) -> None:
        if self._closed:  # stopped before it started
            return
        self._mic.arm()
        self._speaker.arm()
        try:
            for stream in self._streams:
                stream.start()
        except sd.PortAudioError as exc:
            self.close()
            raise AudioDeviceError(f"Could not start the audio devices: {exc}") from None

    def read_frame(self) -> np.ndarray | None:
        """The next 80 ms of microphone audio at 24 kHz, or None if it has not arrived yet.
        Keeps at most `max_input_backlog_s` waiting: older audio is dropped, so a slow
        engine answers late by a bounded amount instead of drifting ever further behind."""
        self._apply_echo_settings()
        if self._echo is not None and not self._echo_batch_due():
            return None
        n = self._in_ring.read_into(self._in_scratch)
        played = self._played_ring.read_into(self._played_scratch)
        if self._echo is not None:
            self._echo.add_played(self._played_scratch[:played], self._speaker_t0)
            if n:
                cleaned = self._echo.process(self._in_scratch[:n], self._mic_t0)
                self._pending = np.concatenate([self._pending, self._echo_resampler.resample_chunk(cleaned)])
        elif n:
            converted = self._in_resampler.resample_chunk(self._in_scratch[:n])
            self._pending = np.concatenate([self._pending, converted])
        limit = max(FRAME_SIZE, int(ENGINE_RATE * self.config.max_input_backlog_s))
        if len(self._pending) > limit:
            self._dropped_in += len(self._pending) - limit
            self._pending = self._pending[-limit:]
        self._backlog_s = len(self._pending) / ENGINE_RATE
        if len(self._pending) < FRAME_SIZE:
            return None
        frame, self._pending = self._pending[:FRAME_SIZE], self._pending[FRAME_SIZE:]
        return frame

    def _echo_batch_due(self) -> bool:
        return echo_batch_due(self._echo, self._echo_resampler, len(self._pending), self._in_ring.available())

    def write_frame(self, pcm: np.ndarray) -> None:
        pcm = np.asarray(pcm, dtype=np.float32) * self._gain
        self._output_dbfs = 10 * float(np.log10(np.mean(pcm ** 2) + 1e-12))
        converted = self._out_resampler.resample_chunk(pcm)
        self._dropped_out += len(converted) - self._out_ring.write(converted)

    def set_speaker_gain(self, gain: float) -> None:
        """The speaker's volume, 0..1 (0: muted), from the next frame written."""
        self._gain = float(min(1.0, max(0.0, gain)))

    def output_level_dbfs(self) -> float:
        """The level of the last frame written to the speaker (after the volume)."""
        return self._output_dbfs

    def set_echo(self, settings: EchoSettings) -> None:
        """From any thread; the engine thread applies it at its next read (a new canceller,
        which converges again)."""
        self._echo_wanted = settings

    def echo_state(self) -> EchoState:
        return EchoState("off", None, 0.0) if self._echo is None else self._echo.state()

    def _apply_echo_settings(self) -> None:
        wanted, self._echo_wanted = self._echo_wanted, None
        if wanted is None:
            return
        # New resamplers too: the microphone's path starts over at the rate it now carries.
        self._echo = EchoCanceller(wanted, self._in_rate, self._out_rate) if wanted.any else None
        self._echo_resampler = ForecastStream(APM_RATE, ENGINE_RATE) if wanted.any else None
        self._in_resampler = soxr.ResampleStream(self._in_rate, ENGINE_RATE, 1, dtype="float32")

    def problem(self) -> str | None:
        """A message for the user if either stream has failed, else None."""
        now = time.monotonic()
        return self._mic.problem(now) or self._speaker.problem(now)

    def counters(self) -> AudioCounters:
        return AudioCounters(
            input_overflows=self._ring_overflows + self._pa_overflows,
            output_underflows=self._ring_underflows + self._pa_underflows,
            dropped_input_s=self._dropped_in / ENGINE_RATE,
            dropped_output_s=self._dropped_out / self._out_rate,
            input_backlog_s=self._backlog_s)

    def close(self) -> None:
        """Stop both streams at once (abort: queued audio is not played out). Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for stream in self._streams:
            try:
                stream.abort()
            except sd.PortAudioError:
                pass  # the device is already gone; closing still releases the stream
            finally:
                stream.close(ignore_errors=True)
