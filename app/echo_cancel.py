"""Echo cancellation on the microphone path: WebRTC's audio processing (AEC3, with its optional
noise suppression and high-pass filter) through livekit's `AudioProcessingModule`, which ships
wheels for Linux, Windows and macOS (bench/echo_options.py compares it with another binding).

A full-duplex model listens while it speaks: through loudspeakers it hears itself. The far end
is exactly what the speaker played (the output callback's samples, silence included, at the
device's rate and clock); the near end is the microphone at its device rate, before the
engine's resampling. Both carry PortAudio's timestamps (the first sample's DAC / ADC time), so
each 10 ms microphone chunk is processed after the far-end chunks played by the time it was
captured; AEC3 estimates the acoustic delay beyond that itself. Everything here runs on the
engine thread, never in an audio callback.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import soxr

APM_RATE = 48000
CHUNK = APM_RATE // 100  # the module takes exactly 10 ms
ACTIVE_DB = 15.0
"""Echo attenuation over the last half second of the model's voice above which the canceller
counts as active (converged); below it, while the model speaks, it is converging."""
WINDOW = 50  # chunks: half a second
MAX_DELAY_MS = 500
FAR_ACTIVE = 1e-5  # mean square of a far-end chunk (-50 dBFS) that counts as the model speaking
MIC_HEARS = 1e-6  # mean square of a microphone chunk (-60 dBFS) with something in it to cancel


@dataclass(frozen=True)
class EchoSettings:
    """What the microphone path does before the model hears it."""
    echo_cancellation: bool = True
    noise_suppression: bool = False
    high_pass: bool = True
    auto_gain: bool = False

    @property
    def any(self) -> bool:
        return self.echo_cancellation or self.noise_suppression or self.high_pass or self.auto_gain


@dataclass(frozen=True)
class EchoState:
    state: str
    """"off", "converging" (the model has not spoken long enough to learn the echo) or "active"."""
    attenuation_db: float | None
    """How much quieter the microphone is after processing while the model speaks (last 0.5 s)."""
    ms_per_frame: float
    """CPU time of the processing per 80 ms of audio (mean so far, the engine thread's)."""


def _module(settings: EchoSettings):
    from livekit.rtc import AudioProcessingModule  # its native library loads only when used
    return AudioProcessingModule(echo_cancellation=settings.echo_cancellation,
                                 noise_suppression=settings.noise_suppression,
                                 high_pass_filter=settings.high_pass, auto_gain_control=settings.auto_gain)


def unavailable() -> str | None:
    """None if the echo-cancellation library loads here, else why not (one line)."""
    try:
        _module(EchoSettings())
    except Exception as exc:  # an import error, or its native library failing to load
        return f"echo cancellation is not available ({type(exc).__name__}: {exc})"
    return None


def _frame():
    """A 10 ms livekit AudioFrame and an int16 array over its buffer."""
    from livekit.rtc import AudioFrame
    frame = AudioFrame(bytearray(CHUNK * 2), APM_RATE, 1, CHUNK)
    return frame, np.frombuffer(frame.data, dtype=np.int16)


def _int16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)


class EchoCanceller:
    """Microphone audio in at `mic_rate`, processed audio out at APM_RATE; the played audio in
    at `speaker_rate`. The first sample of each stream carries its PortAudio time."""

    def __init__(self, settings: EchoSettings, mic_rate: int, speaker_rate: int):
        self.settings = settings
        self._apm = _module(settings)
        self._mic_rs = None if mic_rate == APM_RATE else soxr.ResampleStream(mic_rate, APM_RATE, 1, dtype="float32")
        self._far_rs = (None if speaker_rate == APM_RATE
                        else soxr.ResampleStream(speaker_rate, APM_RATE, 1, dtype="float32"))
        self._near = np.zeros(0, np.float32)
        self._far = np.zeros(0, np.int16)
        self._near_t: float | None = None  # capture time of the next near chunk
        self._far_t: float | None = None  # play time of the next far chunk
        self._energy = np.zeros((WINDOW, 3))  # per chunk: far, near in, near out (mean squares)
        self._chunks = 0
        self._spent = 0.0
        self._active = False
        self._delay_ms = -1
        # One frame each way, reused: the module works on a frame's buffer in place.
        self._near_frame, self._near_pcm = _frame()
        self._far_frame, self._far_pcm = _frame()

    def add_played(self, samples: np.ndarray, first_dac_time: float | None) -> None:
        """What the speaker played (continuing what came before); `first_dac_time`: when the
        stream's first sample reached the speaker, known once it has played."""
        if self._far_t is None:
            if first_dac_time is None or not len(samples):
                return
            self._far_t = first_dac_time
        self._far = np.concatenate([self._far, _int16(self._resampled(self._far_rs, samples))])

    def process(self, samples: np.ndarray, first_adc_time: float | None) -> np.ndarray:
        """The microphone's samples (continuing what came before; the stream's first captured
        at `first_adc_time`) -> processed audio at APM_RATE, whole 10 ms chunks only."""
        if self._near_t is None:
            self._near_t = first_adc_time if first_adc_time is not None else 0.0
        self._near = np.concatenate([self._near, self._resampled(self._mic_rs, samples)])
        chunks = len(self._near) // CHUNK
        if not chunks:
            return np.zeros(0, np.float32)
        near = self._near[:chunks * CHUNK]
        pcm = _int16(near)
        far_energy = np.zeros(chunks)
        started = time.thread_time()  # this thread's CPU: the module runs in the calling thread
        for i in range(chunks):
            far_energy[i] = self._feed_far(self._near_t)
            self._near_pcm[:] = pcm[i * CHUNK:(i + 1) * CHUNK]
            self._apm.process_stream(self._near_frame)  # in place
            pcm[i * CHUNK:(i + 1) * CHUNK] = self._near_pcm
            self._near_t += CHUNK / APM_RATE
        self._spent += time.thread_time() - started
        out = pcm.astype(np.float32) / 32767.0
        for i, energies in enumerate(zip(far_energy, np.mean(near.reshape(chunks, CHUNK) ** 2, axis=1),
                                         np.mean(out.reshape(chunks, CHUNK) ** 2, axis=1))):
            self._energy[(self._chunks + i) % WINDOW] = energies
        self._chunks += chunks
        self._near = self._near[chunks * CHUNK:]
        return out

    def _feed_far(self, until: float) -> float:
        """Give the module every far-end chunk played by `until` (the near chunk's capture
        time); returns the mean square of the last one (0 if none)."""
        energy = 0.0
        while self._far_t is not None and self._far_t <= until and len(self._far) >= CHUNK:
            chunk, self._far = self._far[:CHUNK], self._far[CHUNK:]
            self._far_pcm[:] = chunk
            self._apm.process_reverse_stream(self._far_frame)
            self._far_t += CHUNK / APM_RATE
            energy = float(np.square(chunk, dtype=np.float64).mean()) / 32767.0 ** 2
        if self._far_t is not None:
            # What is left was played after the near chunk: the module's own estimator covers
            # the acoustic path beyond this (up to hundreds of ms). Each call crosses into the
            # native library, so only a new value is passed.
            # The module takes 0..MAX_DELAY_MS (a stalled speaker would ask for more).
            delay = min(MAX_DELAY_MS, int(max(0.0, until - (self._far_t - CHUNK / APM_RATE)) * 1000))
            if delay != self._delay_ms:
                self._apm.set_stream_delay_ms(delay)
                self._delay_ms = delay
        return energy

    def state(self) -> EchoState:
        if not self.settings.echo_cancellation:
            return EchoState("off", None, self._ms_per_frame())
        window = self._energy[:min(self._chunks, WINDOW)]
        speaking = window[window[:, 0] > FAR_ACTIVE]
        heard = speaking[speaking[:, 1] > MIC_HEARS]
        attenuation = None
        if len(heard) >= WINDOW // 2:
            attenuation = float(10 * np.log10((heard[:, 1].sum() + 1e-12) / (heard[:, 2].sum() + 1e-12)))
            self._active = self._active or attenuation >= ACTIVE_DB  # converged once: AEC3 stays so
        elif len(speaking) >= WINDOW // 2:
            self._active = True  # the model speaks and the microphone hears nearly nothing of it
        return EchoState("active" if self._active else "converging", attenuation, self._ms_per_frame())

    def _ms_per_frame(self) -> float:
        return 1000 * self._spent / self._chunks * 8 if self._chunks else 0.0

    @staticmethod
    def _resampled(stream, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples, np.float32)
        return samples.copy() if stream is None else stream.resample_chunk(samples)
