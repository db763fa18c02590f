"""Microphone and speaker streams, converted to and from the engine's 24 kHz frames.

Each device runs at its own rate. PortAudio's callbacks only move samples between the
device and a preallocated ring (no allocation, lock, logging or torch there; the speaker's
applies its volume and keeps what it played: app/audio/speaker_queue.py); the engine thread does
everything else: echo cancellation (app.audio.echo_cancel), streaming resampling with soxr, cutting
80 ms frames, bounding latency, and watching that both streams are still alive.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

import numpy as np
import soxr

from engine import FRAME_SIZE
from engine import SAMPLE_RATE as ENGINE_RATE

from . import audio_devices
from .audio_devices import AudioDevice, sd
from .device_streams import AudioDeviceError, DeviceStream, Silence, fill_gap
from .device_switch import DeviceSwitch, LinkDevices, Notify
from .echo_cancel import APM_RATE, EchoCanceller, EchoSettings, EchoState, ForecastStream
from .played_track import MicPositions, PlayedTrack
from .ring_buffer import SpscRing
from .speaker_queue import QUIET_MEAN_SQUARE, SpeakerQueue


@dataclass(frozen=True)
class AudioConfig:
    prebuffer_s: float = 0.12          # speaker waits for this much audio before playing
    max_input_backlog_s: float = 0.32  # older microphone audio is dropped beyond this
    input_capacity_s: float = 1.0
    # Model audio late after a stall still plays, this much beyond the prebuffer; a frame
    # later than that is skipped (app/audio/speaker_queue.py), shown and marked in the recording.
    max_output_backlog_s: float = 2.0
    # Device buffer, seconds: Python callbacks on a busy machine miss the deadlines of
    # PortAudio's "low" setting and the device glitches.
    device_latency: float = 0.05
    stall_timeout_s: float = 1.0       # a running stream silent this long has failed
    start_timeout_s: float = 4.0       # grace while a sound server sets a stream up
    step_stall_s: float = 0.0          # how long one model step may hold the engine (SpeakerQueue's stall_s)

    def for_step(self, step_s: float) -> AudioConfig:
        """For a model that works `step_s` at a time (once a second): a step may run for up to
        its length; meanwhile the microphone's audio waits to be heard, not dropped, and the
        speaker plays from the speech queued before it (the longest recent stall's worth is kept
        queued: SpeakerQueue.note_gap)."""
        if step_s <= FRAME_SIZE / ENGINE_RATE:
            return self
        backlog = self.max_input_backlog_s + step_s
        return replace(self, max_input_backlog_s=backlog, input_capacity_s=max(self.input_capacity_s, backlog + 0.5),
                       step_stall_s=step_s)


@dataclass(frozen=True)
class AudioCounters:
    input_overflows: int      # microphone audio lost before the engine thread saw it
    output_underflows: int    # the speaker ran dry in the model's speech (a gap heard)
    dropped_input_s: float    # microphone audio dropped to keep latency bounded
    dropped_output_s: float   # model audio skipped: the speaker was more than the backlog allowed behind
    input_backlog_s: float    # microphone audio waiting when the engine took its last frame
    output_backlog_s: float = 0.0  # model audio queued for the speaker after the last frame written


def echo_batch_due(echo: EchoCanceller, resampler: ForecastStream, pending: int, available: int) -> bool:
    """With echo cancellation on, the microphone's audio waits in its ring until it could
    complete the next frame: the canceller then runs about once a frame instead of at every
    poll, each call starting with cold caches. The resamplers give their output in blocks (the
    48-to-24 kHz one 35 ms at a time), so whether a call would complete the frame is forecast
    from what each holds (`pending`: engine-rate samples waiting; `available`: the ring's);
    the forecast never falls short, so no frame waits longer than with a call at every poll."""
    missing = FRAME_SIZE - pending
    return missing <= 0 or resampler.most(echo.most_out(available)) >= missing


class AudioLink(LinkDevices):
    """An opened microphone + speaker pair. `start()`, then from one engine thread:
    `read_frame()` / `write_frame()` / `problem()` / `counters()`; `close()` and
    `use_device()` (another device, mid-conversation: app/audio/device_switch.py) from anywhere.
    `notify(text, kind)` hears, on the engine thread, what changed or failed meanwhile."""

    plays = True  # the model's speech reaches a speaker: talking over it can interrupt it

    def __init__(self, microphone: AudioDevice, speaker: AudioDevice,
                 config: AudioConfig = AudioConfig(), echo: EchoSettings | None = None,
                 notify: Notify | None = None):
        if sd is None:
            raise AudioDeviceError("No audio system is available on this machine.")
        if audio_devices.hears_itself(microphone, speaker):
            raise AudioDeviceError(audio_devices.hears_itself_text(microphone, speaker))
        self.config = config
        self.description = f"{microphone.name} → engine → {speaker.name}"
        in_rate, out_rate = microphone.sample_rate, speaker.sample_rate
        self._in_ring = SpscRing(int(in_rate * config.input_capacity_s))
        self._speaker_queue = SpeakerQueue(out_rate, config.prebuffer_s, config.max_output_backlog_s,
                                           config.step_stall_s)
        self._played_track = PlayedTrack(self._speaker_queue)  # the recording's model channel
        self._last_write: tuple[float, bool] | None = None  # the model's last frame: when written, if it sounded
        self._mic_positions = MicPositions()  # where each frame lies in the microphone's stream
        self._in_lost = self._in_lost_seen = 0  # microphone samples the full ring refused
        self._in_scratch = np.zeros(self._in_ring.capacity, dtype=np.float32)
        self._in_resampler = soxr.ResampleStream(in_rate, ENGINE_RATE, 1, dtype="float32")
        # Echo cancellation: what the speaker played (the queue's far end), beside what the
        # microphone captured, each with its first sample's PortAudio time (set by the callbacks).
        self._played_scratch = np.zeros(self._speaker_queue.far.capacity, dtype=np.float32)
        self._mic_t0: float | None = None  # of the microphone's timeline (the stream's, or a silence's)
        self._in_first_t: float | None = None  # callback: the current stream's first sample's time
        self._echo: EchoCanceller | None = None
        self._echo_resampler: ForecastStream | None = None
        self._echo_wanted: EchoSettings | None = echo or EchoSettings()  # applied by the engine thread
        self._echo_settings = self._echo_wanted  # those applied last
        self._echo_reset = False  # a new canceller for a new microphone, with the settings it had
        self._output_dbfs = -120.0
        self._out_resampler = soxr.ResampleStream(ENGINE_RATE, out_rate, 1, dtype="float32")
        self._pending = np.zeros(0, dtype=np.float32)  # engine-rate audio not yet framed
        self._backlog_s = 0.0  # waiting microphone audio when the engine last looked
        self._in_rate, self._out_rate = in_rate, out_rate
        # Where the engine thread is in each stream (the PortAudio time of the next sample
        # it reads follows from these), and the silence heard while no microphone is open.
        self._in_read = self._in_lost_base = self._far_read = 0
        self._silence: Silence | None = None
        self._played_count = 0  # callback: samples handed to the speaker queue, gaps included
        self._speaker_fresh = False  # callback: a reopened speaker's first call is still to come
        self._gap_zeros = np.zeros(int(out_rate * 0.25), dtype=np.float32)
        self._fatal: str | None = None
        self._switch = DeviceSwitch(self, notify)
        self._ring_overflows = self._pa_overflows = 0
        self._pa_underflows = 0
        self._dropped_in = 0
        self._close_lock = threading.Lock()
        self._closed = False
        self._mic_stream = DeviceStream("input", config, self._on_input)
        self._speaker_stream = DeviceStream("output", config, self._on_output)
        try:
            self._mic_stream.open(microphone, in_rate)
            self._speaker_stream.open(speaker, out_rate)
        except AudioDeviceError:
            self.close()
            raise

    # --- PortAudio's real-time thread -------------------------------------------------
    def _on_input(self, indata, frames, time_info, status):
        if self._in_first_t is None:
            self._in_first_t = time_info.inputBufferAdcTime or time_info.currentTime
        self._mic_stream.watch.calls += 1
        if status.input_overflow:
            self._pa_overflows += 1
        taken = self._in_ring.write(indata[:, 0])
        if taken < frames:
            self._ring_overflows += 1
            self._in_lost += frames - taken

    def _on_output(self, outdata, frames, time_info, status):
        self._speaker_stream.watch.calls += 1
        if status.output_underflow:
            self._pa_underflows += 1
        dac_time = time_info.outputBufferDacTime or time_info.currentTime
        queue = self._speaker_queue
        # A reopened speaker, or one the device ran dry (this call came late: PortAudio says
        # so): what played meanwhile was silence.
        if self._speaker_fresh or status.output_underflow:
            self._speaker_fresh = False
            if queue.t0 is not None:
                gap = round((dac_time - queue.t0) * self._out_rate) - self._played_count
                if gap > 0:  # both logs stay on the device's timeline
                    queue.played_lost += fill_gap(queue.played, self._gap_zeros, gap)
                    fill_gap(queue.far, self._gap_zeros, gap)
                    self._played_count += gap
        self._played_count += frames
        queue.fill(outdata[:, 0], dac_time)

    # --- the engine thread --------------------------------------------------------------
    def start(self) -> None:
        if self._closed:  # stopped before it started
            return
        try:
            self._mic_stream.start()
            self._speaker_stream.start()
        except AudioDeviceError:
            self.close()
            raise

    def read_frame(self) -> np.ndarray | None:
        """The next 80 ms of microphone audio at 24 kHz, or None if it has not arrived yet.
        Keeps at most `max_input_backlog_s` waiting: older audio is dropped, so a slow
        engine answers late by a bounded amount instead of drifting ever further behind."""
        if self._silence is not None and self._in_first_t is not None:
            self._restart_microphone()  # a reopened microphone delivers: its audio from now on
        self._apply_echo_settings()
        silent = self._silence is not None  # no microphone delivering yet: the model hears silence
        if not silent and self._echo is not None and not self._echo_batch_due():
            return None
        n = 0 if silent else self._in_ring.read_into(self._in_scratch)
        if self._mic_t0 is None:
            self._mic_t0 = self._in_first_t
        lost = self._in_lost - self._in_lost_seen  # read after: lost after what was just read
        played = self._speaker_queue.far.read_into(self._played_scratch)
        far_time, near_time = self._far_time(), self._near_time()  # of this call's first samples
        self._far_read += played
        self._in_read += n
        if silent:
            self._pending = np.concatenate([self._pending, self._silence.due()])
        elif self._echo is not None:
            self._echo.add_played(self._played_scratch[:played], far_time)
            if n:
                cleaned = self._echo.process(self._in_scratch[:n], near_time)
                self._pending = np.concatenate([self._pending, self._echo_resampler.resample_chunk(cleaned)])
        elif n:
            converted = self._in_resampler.resample_chunk(self._in_scratch[:n])
            self._pending = np.concatenate([self._pending, converted])
        if lost:
            self._in_lost_seen += lost
            self._mic_positions.lost(len(self._pending), lost * ENGINE_RATE / self._in_rate)
        limit = max(FRAME_SIZE, int(ENGINE_RATE * self.config.max_input_backlog_s))
        if len(self._pending) > limit:
            self._dropped_in += len(self._pending) - limit
            self._mic_positions.take(len(self._pending) - limit)
            self._pending = self._pending[-limit:]
        self._backlog_s = len(self._pending) / ENGINE_RATE
        if len(self._pending) < FRAME_SIZE:
            return None
        frame, self._pending = self._pending[:FRAME_SIZE], self._pending[FRAME_SIZE:]
        position = self._mic_positions.take(FRAME_SIZE)
        self._played_track.want((self._mic_t0 or 0.0) + position / ENGINE_RATE)
        return frame

    def _far_time(self) -> float | None:
        t0 = self._speaker_queue.t0
        return None if t0 is None else t0 + self._far_read / self._out_rate

    def _near_time(self) -> float | None:
        if self._mic_t0 is None:
            return None
        return self._mic_t0 + (self._in_read + self._in_lost_seen - self._in_lost_base) / self._in_rate

    def _echo_batch_due(self) -> bool:
        return echo_batch_due(self._echo, self._echo_resampler, len(self._pending), self._in_ring.available())

    def write_frame(self, pcm: np.ndarray) -> float:
        """Queue a frame of the model's audio for the speaker; returns the seconds of it
        skipped (0.0, or the whole frame when the speaker is too far behind)."""
        pcm = np.asarray(pcm, dtype=np.float32)
        queue = self._speaker_queue
        now, mean_square = time.monotonic(), float(np.mean(pcm ** 2))
        if self._last_write is not None:
            queue.note_gap(now - self._last_write[0], in_speech=self._last_write[1])
        self._last_write = (now, mean_square >= QUIET_MEAN_SQUARE)
        self._output_dbfs = 10 * float(np.log10(mean_square * queue.gain ** 2 + 1e-12))
        if mean_square < QUIET_MEAN_SQUARE and queue.late():
            return 0.0  # a pause left out: the speaker catches up, no speech lost
        if queue.full():
            skipped = round(len(pcm) * self._out_rate / ENGINE_RATE)
            queue.dropped += skipped
            return skipped / self._out_rate
        queue.put(self._out_resampler.resample_chunk(pcm))
        return 0.0

    def played_frames(self, final: bool = False) -> list[np.ndarray]:
        """For the recording: what the speaker played (before the volume) while each frame
        `read_frame` gave was captured, in order, once played; with `final` (after `close`),
        the rest, silence where nothing was played."""
        return self._played_track.frames(final)

    def set_speaker_gain(self, gain: float) -> None:
        """The speaker's volume, 0..1 (0: muted), at once (as samples are handed to the device)."""
        self._speaker_queue.gain = float(min(1.0, max(0.0, gain)))

    def output_level_dbfs(self) -> float:
        """The level of the last frame written to the speaker (after the volume)."""
        return self._output_dbfs

    def cut_speaker(self) -> None:
        """The model's queued speech fades out and stops (app/audio/speaker_queue.py, `cut`), and the
        resampler starts over: what it still holds of the last frame would play after the cut."""
        self._speaker_queue.cut()
        self._out_resampler = soxr.ResampleStream(ENGINE_RATE, self._out_rate, 1, dtype="float32")

    def speech_positions(self) -> tuple[int, int, tuple[int, int]] | None:
        """Where the speaker is in the model's speech (SpeakerQueue.positions)."""
        return self._speaker_queue.positions()

    def set_echo(self, settings: EchoSettings) -> None:
        """From any thread; the engine thread applies it at its next read (a new canceller,
        which converges again)."""
        self._echo_wanted = settings

    def echo_state(self) -> EchoState:
        return EchoState("off", None, 0.0) if self._echo is None else self._echo.state()

    def _apply_echo_settings(self) -> None:
        wanted, self._echo_wanted = self._echo_wanted, None
        if wanted is None and self._echo_reset:
            wanted = self._echo_settings
        self._echo_reset = False
        if wanted is None:
            return
        self._echo_settings = wanted
        # New resamplers too: the microphone's path starts over at the rate it now carries.
        self._echo = EchoCanceller(wanted, self._in_rate, self._out_rate) if wanted.any else None
        self._echo_resampler = ForecastStream(APM_RATE, ENGINE_RATE) if wanted.any else None
        self._in_resampler = soxr.ResampleStream(self._in_rate, ENGINE_RATE, 1, dtype="float32")

    def problem(self) -> str | None:
        """A message for the user if the speaker failed (the conversation cannot go on), else
        None. Applies the devices asked for meanwhile; a microphone that failed is opened
        again, the model hearing silence until it works (app/audio/device_switch.py)."""
        now = time.monotonic()
        self._switch.apply(now)
        return self._fatal or self._speaker_stream.problem(now)

    def counters(self) -> AudioCounters:
        return AudioCounters(
            input_overflows=self._ring_overflows + self._pa_overflows,
            output_underflows=self._speaker_queue.underflows + self._pa_underflows,
            dropped_input_s=self._dropped_in / ENGINE_RATE,
            dropped_output_s=self._speaker_queue.dropped / self._out_rate,
            input_backlog_s=self._backlog_s,
            output_backlog_s=self._speaker_queue.backlog_s())

    def close(self) -> None:
        """Stop both streams at once (abort: queued audio is not played out). Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._mic_stream.close(for_good=True)
        self._speaker_stream.close(for_good=True)
