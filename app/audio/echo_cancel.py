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

import ctypes
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import soxr

APM_RATE = 48000
CHUNK = APM_RATE // 100  # the module takes exactly 10 ms
ACTIVE_DB = 15.0
"""Echo attenuation over the last half second of the model's voice above which the canceller
counts as active (converged); below it, while the model speaks, it is converging."""
WINDOW = 50  # chunks: half a second
LEARNED_S = 5.0
"""Seconds of the model's voice after which the canceller has learned the room: AEC3 converges
within a few seconds of it. By then, little attenuation means little echo to remove
(headphones, a quiet speaker), not a canceller still learning."""
HEARD_DB = 3.0
"""Attenuation below which there was little echo to remove: "0 dB removed" would read as a fault."""
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
    """"off", "converging" (the model has not spoken long enough to learn the echo), "active",
    or "no_echo" (learned: the model spoke LEARNED_S and its voice barely reached the microphone)."""
    attenuation_db: float | None
    """How much quieter the microphone is after processing while the model speaks (last 0.5 s)."""
    ms_per_frame: float
    """CPU time of the whole canceller (resampling, conversions, the module) per 80 ms of
    microphone audio: the mean so far, on the engine thread."""
    voice_s: float = 0.0
    """Seconds of the model's voice the canceller has heard played so far."""


def _module(settings: EchoSettings):
    from livekit.rtc import AudioProcessingModule  # its native library loads only when used
    return AudioProcessingModule(echo_cancellation=settings.echo_cancellation,
                                 noise_suppression=settings.noise_suppression,
                                 high_pass_filter=settings.high_pass, auto_gain_control=settings.auto_gain)


def unavailable() -> str | None:
    """None if the echo-cancellation library loads here, else why not (one line)."""
    try:
        _Module(EchoSettings())
    except Exception as exc:  # no livekit, its native library not loading, or its internals moved
        return f"echo cancellation is not available ({type(exc).__name__}: {exc})"
    return None


class _Module:
    """livekit's module working in place on `pcm`, int16 rows of 10 ms, each row given either
    way (played audio first, then the microphone's, in each call's block).

    livekit's process_stream builds, serialises and parses a protobuf message and wraps a reply
    handle on every call; a row's request never changes (the module's handle, the row's
    address, its size and rate), so it is serialised once and sent to the native entry point
    livekit's call uses: the same processing, bit for bit (tests/test_app_echo_loop.py)."""

    def __init__(self, settings: EchoSettings):
        from livekit.rtc._ffi_client import FfiClient  # the native library's only way in
        from livekit.rtc._proto import ffi_pb2
        self.module = _module(settings)  # owns the native module, released with this object
        self._pb = ffi_pb2
        self._lib = FfiClient.instance._ffi_lib
        self._reply = ctypes.POINTER(ctypes.c_ubyte)()
        self._reply_len = ctypes.c_size_t()
        self._reply_refs = ctypes.byref(self._reply), ctypes.byref(self._reply_len)
        self.pcm = np.zeros((0, CHUNK), np.int16)
        self._requests: list[tuple[tuple, tuple]] = []  # per row: (capture, render)

    def reserve(self, rows: int) -> None:
        """Room for `rows` rows (growing moves the buffer, so the requests are made again)."""
        if rows > len(self.pcm):
            self.pcm = np.zeros((max(rows, 2 * len(self.pcm)), CHUNK), np.int16)
            self._requests = [(self._request("apm_process_stream", row),
                               self._request("apm_process_reverse_stream", row)) for row in self.pcm]

    def process_stream(self, row: int) -> None:
        self._send(self._requests[row][0])

    def process_reverse_stream(self, row: int) -> None:
        self._send(self._requests[row][1])

    def _request(self, kind: str, pcm: np.ndarray) -> tuple:
        request = self._pb.FfiRequest()
        fields = getattr(request, kind)
        fields.apm_handle = self.module._ffi_handle.handle
        fields.data_ptr, fields.size = pcm.ctypes.data, pcm.nbytes
        fields.sample_rate, fields.num_channels = APM_RATE, 1
        data = request.SerializeToString()
        done = self._pb.FfiResponse()
        getattr(done, kind).SetInParent()  # the reply that carries no error
        return kind, (ctypes.c_ubyte * len(data)).from_buffer_copy(data), len(data), done.SerializeToString()

    def _send(self, request: tuple) -> None:
        kind, data, size, done = request
        handle = self._lib.livekit_ffi_request(data, size, *self._reply_refs)
        if not handle:
            raise RuntimeError(f"livekit's audio processing failed on {kind} (its log says why)")
        try:
            reply = ctypes.string_at(self._reply, self._reply_len.value)
            if reply != done:
                error = getattr(self._pb.FfiResponse.FromString(reply), kind).error
                if error:
                    raise RuntimeError(f"livekit's audio processing, {kind}: {error}")
        finally:
            self._lib.livekit_ffi_drop_handle(handle)


class ForecastStream:
    """A soxr stream (mono float32) that also says the most that more input could bring out.

    soxr gives its output in blocks (48 to 24 kHz: 830 samples; 44.1 to 48 kHz: 889-893): a
    call brings out nothing until what the stream holds (its delay() plus the new input, in
    output samples) reaches a threshold, then a block for each time it does, keeping less than
    the threshold. The threshold is learnt as the most ever kept and the blocks' sizes from the
    outputs, each with a margin, so the forecast does not fall short of a call's output; until
    a block has come out, or after soxr breaks the rule, it forecasts everything held."""

    MARGIN = 2.0  # output samples: soxr's threshold moves by a fraction of one with the phase
    SPREAD = 0.005  # the least relative margin on a block's size (a non-integer ratio varies it)

    def __init__(self, in_rate: int, out_rate: int):
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32")
        self._ratio = out_rate / in_rate
        self._held = self._stream.delay()
        self._threshold = 0.0
        self._blocks: tuple[int, int] | None = None  # the smallest and largest single block seen

    def most(self, samples: int) -> float:
        """The most output `samples` more input could bring out now."""
        held = self._held + samples * self._ratio
        if not samples or held < self._threshold - self.MARGIN:
            return 0.0
        if self._blocks is None:
            return held
        spread = max(self.SPREAD, self._blocks[1] / self._blocks[0] - 1)
        blocks = (held - self._threshold + self.MARGIN) // (self._blocks[0] * (1 - spread)) + 1
        return min(held, blocks * self._blocks[1] * (1 + spread))

    def resample_chunk(self, samples: np.ndarray) -> np.ndarray:
        forecast = self.most(len(samples))
        out = self._stream.resample_chunk(samples)
        self._held = self._stream.delay()
        if len(out) > forecast:  # soxr broke the rule: forecast everything held until relearnt
            self._threshold, self._blocks = 0.0, None
        elif len(out):
            least = min(self._blocks[0], len(out)) if self._blocks else len(out)
            single = [size for size in (*(self._blocks or ()), len(out)) if size < 1.5 * least]
            self._blocks = least, max(single)
        self._threshold = max(self._threshold, self._held)  # what is left is below it
        return out


FULL_SCALE = 32767.0


def _to_int16(scaled: np.ndarray, out: np.ndarray) -> None:
    """`scaled` (float32 already multiplied by FULL_SCALE; clipped here, in place) rounded into
    `out` (int16, same shape). Clipping to whole numbers before rounding gives what rounding
    first does."""
    np.clip(scaled, -32768, 32767, out=scaled)
    np.rint(scaled, out=out, casting="unsafe")  # whole numbers in range: the cast is exact


def _mean_squares(rows: np.ndarray, scale: float = 1.0) -> list[float]:
    """Each row's mean square, times `scale`: one pass, no squared copy, no other array call
    (a call costs tens of microseconds with cold caches)."""
    scale /= rows.shape[1]
    return [v * scale for v in np.einsum("ij,ij->i", rows, rows).tolist()]


class EchoCanceller:
    """Microphone audio in at `mic_rate`, processed audio out at APM_RATE; the played audio in
    at `speaker_rate`. The first sample of each stream carries its PortAudio time.

    The engine thread calls in every few milliseconds with a few milliseconds of audio and, on
    a busy machine, each call starts with cold caches: an array operation then costs tens of
    microseconds, so a call does few. Played audio is only kept until the microphone's next
    whole chunk, then resampled in one go (soxr's output depends on how much went in, not on
    how it was cut); that call's played and microphone chunks are converted to int16 together,
    into the rows the module works on in place."""

    def __init__(self, settings: EchoSettings, mic_rate: int, speaker_rate: int):
        self.settings = settings
        self._apm = _Module(settings)
        self._mic_rs = None if mic_rate == APM_RATE else ForecastStream(mic_rate, APM_RATE)
        self._far_rs = (None if speaker_rate == APM_RATE
                        else soxr.ResampleStream(speaker_rate, APM_RATE, 1, dtype="float32"))
        self._near = np.zeros(0, np.float32)  # less than a chunk, at APM_RATE
        self._played: list[np.ndarray] = []  # at speaker_rate, not yet resampled
        self._far = np.zeros(0, np.float32)  # at APM_RATE, not yet fed
        self._near_t: float | None = None  # capture time of the next near chunk
        self._far_t: float | None = None  # play time of the next far chunk
        self._levels: deque[tuple[float, float, float]] = deque(maxlen=WINDOW)
        """Per chunk: mean squares of the far chunk fed just before it (0 if none), of the chunk
        and of what the module made of it."""
        self._chunks = 0
        self._voice_chunks = 0  # near chunks processed while the model's voice was playing
        self._spent = 0.0
        self._active = False
        self._delay_ms = -1

    def add_played(self, samples: np.ndarray, first_dac_time: float | None) -> None:
        """What the speaker played (continuing what came before); `first_dac_time`: when the
        stream's first sample reached the speaker, known once it has played."""
        if not len(samples):
            return
        started = time.thread_time()
        if self._far_t is None:
            if first_dac_time is None:
                return
            self._far_t = first_dac_time
        self._played.append(np.array(samples, np.float32))  # the caller reuses its buffer
        self._spent += time.thread_time() - started

    def process(self, samples: np.ndarray, first_adc_time: float | None) -> np.ndarray:
        """The microphone's samples (continuing what came before; the stream's first captured
        at `first_adc_time`) -> processed audio at APM_RATE, whole 10 ms chunks only."""
        started = time.thread_time()  # this thread's CPU: the module runs in the calling thread
        if self._near_t is None:
            self._near_t = first_adc_time if first_adc_time is not None else 0.0
        samples = np.asarray(samples, np.float32)
        near = samples if self._mic_rs is None else self._mic_rs.resample_chunk(samples)  # copied below
        if len(self._near) + len(near) < CHUNK:
            self._near = np.concatenate([self._near, near])
            out = np.zeros(0, np.float32)
        else:
            out = self._cancel(near)
        self._spent += time.thread_time() - started
        return out

    def most_out(self, samples: int) -> int:
        """The most processed samples (at APM_RATE) that `samples` more microphone samples
        could bring out now: never fewer than process() will return for them."""
        new = samples if self._mic_rs is None else self._mic_rs.most(samples)
        return int(len(self._near) + new) // CHUNK * CHUNK

    def _cancel(self, near: np.ndarray) -> np.ndarray:
        far = self._far_ready()
        far_rows = len(far) // CHUNK
        block = np.concatenate([far[:far_rows * CHUNK], self._near, near])
        rows = len(block) // CHUNK
        self._near = block[rows * CHUNK:]  # not scaled below: only the whole rows are
        grid = np.multiply(block[:rows * CHUNK], FULL_SCALE, out=block[:rows * CHUNK]).reshape(rows, CHUNK)
        levels_in = _mean_squares(grid, FULL_SCALE ** -2)
        self._apm.reserve(rows)
        _to_int16(grid, self._apm.pcm[:rows])
        fed = 0
        far_levels = []
        for row in range(far_rows, rows):
            before, fed = fed, self._feed_far(far_rows, fed, self._near_t)
            far_levels.append(levels_in[fed - 1] if fed > before else 0.0)
            self._apm.process_stream(row)  # in place
            self._near_t += CHUNK / APM_RATE
        self._far = far[fed * CHUNK:]
        out = np.divide(self._apm.pcm[far_rows:rows], FULL_SCALE, dtype=np.float32)
        self._levels.extend(zip(far_levels, levels_in[far_rows:], _mean_squares(out)))
        self._chunks += rows - far_rows
        self._voice_chunks += sum(level > FAR_ACTIVE for level in far_levels)
        return out.reshape(-1)

    def _far_ready(self) -> np.ndarray:
        """The played audio not yet fed, at APM_RATE."""
        if not self._played:
            return self._far
        played = self._played[0] if len(self._played) == 1 else np.concatenate(self._played)
        self._played = []
        if self._far_rs is not None:
            played = self._far_rs.resample_chunk(played)
        return np.concatenate([self._far, played]) if len(self._far) else played

    def _feed_far(self, far_rows: int, fed: int, until: float) -> int:
        """Give the module the far rows played by `until` (the near chunk's capture time), from
        row `fed` on (of `far_rows`); returns how many are given by now."""
        while self._far_t is not None and self._far_t <= until and fed < far_rows:
            self._apm.process_reverse_stream(fed)
            self._far_t += CHUNK / APM_RATE
            fed += 1
        if self._far_t is not None:
            # What is left was played after the near chunk: the module's own estimator covers
            # the acoustic path beyond this (up to hundreds of ms). WebRTC keeps the value
            # (AEC3 reads it on the frame it is given), so only a new one is sent.
            # The module takes 0..MAX_DELAY_MS (a stalled speaker would ask for more).
            delay = min(MAX_DELAY_MS, int(max(0.0, until - (self._far_t - CHUNK / APM_RATE)) * 1000))
            if delay != self._delay_ms:
                self._apm.module.set_stream_delay_ms(delay)
                self._delay_ms = delay
        return fed

    def state(self) -> EchoState:
        if not self.settings.echo_cancellation:
            return EchoState("off", None, self._ms_per_frame())
        window = np.array(self._levels).reshape(-1, 3)
        speaking = window[window[:, 0] > FAR_ACTIVE]
        heard = speaking[speaking[:, 1] > MIC_HEARS]
        attenuation = None
        if len(heard) >= WINDOW // 2:
            attenuation = float(10 * np.log10((heard[:, 1].sum() + 1e-12) / (heard[:, 2].sum() + 1e-12)))
            self._active = self._active or attenuation >= ACTIVE_DB  # converged once: AEC3 stays so
        elif len(speaking) >= WINDOW // 2:
            self._active = True  # the model speaks and the microphone hears nearly nothing of it
        voice_s = self._voice_chunks * CHUNK / APM_RATE
        state = "active" if self._active else "converging"
        if not self._active and voice_s >= LEARNED_S:
            state = "active" if attenuation is not None and attenuation >= HEARD_DB else "no_echo"
        return EchoState(state, attenuation, self._ms_per_frame(), voice_s)

    def _ms_per_frame(self) -> float:
        return 1000 * self._spent / self._chunks * 8 if self._chunks else 0.0
