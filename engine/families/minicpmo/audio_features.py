"""MiniCPM-o 4.5's per-unit audio features: the 16 kHz sample buffer and the log-mel frames its Whisper encoder gets,
exactly as the reference makes them (MiniCPM-o-Demo 28b60cf): DuplexCapability.streaming_prefill's buffer
(MiniCPMO45/modeling_minicpmo_unified.py:4843-4907: the first unit left-padded to 1035 ms, 1030 ms of it used, then
1000 ms units) feeding the processor's StreamingMelProcessorExact (processing_minicpmo.py:710-910), which appends
every unit to one buffer and recomputes the log-mel of the whole buffer each time (Whisper's STFT and Slaney
filters; under 5 s of buffer only the 1e-10 floor, from 5 s on the buffer's max - 8; then (x + 4) / 4), drops its
first 10 s whenever it reaches 30 s, and emits a unit's 100 frames with 2 frames of context either side (none before
the first unit) for the encoder's convolutions. Whole-buffer recomputation is kept: the dynamic floor depends on
every frame of the buffer. Torch on any device (the buffer lives there at a fixed capacity); no librosa.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

__all__ = ["FeatureSizes", "UnitFeatures", "UnitMel", "log_mel", "mel_filters", "reference_mels"]


@dataclass(frozen=True)
class FeatureSizes:
    """Stream constants: DuplexCapability.__init__'s defaults (modeling_minicpmo_unified.py:4291-4294), passed to
    the processor by MiniCPMO.init_streaming_processor (:193-207, slide 30 s / 10 s); WhisperFeatureExtractor's
    defaults (transformers 4.51: 400/160, 30 s truncation) as MiniCPMAAudioProcessor keeps them; the log floor
    switch of StreamingMelProcessorExact._extract_full (processing_minicpmo.py:789-794). Only the mel count is in
    config.json (audio_config.num_mel_bins)."""
    sample_rate: int = 16000
    n_fft: int = 400
    hop: int = 160
    n_mels: int = 80
    chunk_ms: int = 1000
    first_chunk_ms: int = 1035
    cnn_redundancy_ms: int = 20
    slide_trigger_s: float = 30.0
    slide_stride_s: float = 10.0
    slide_keep_s: float = 1.0  # _maybe_slide_buffer's min_keep_seconds
    dynamic_from_s: int = 5  # buffers this long or longer get the max - 8 floor
    dynamic_range_db: float = 8.0
    log_floor_db: float = -10.0
    truncate_s: int = 30  # WhisperFeatureExtractor(chunk_length=30) truncates its input (never reached: slide)
    encoder_context: int = 2  # streaming_prefill's prefix/suffix_extra_frames, hard-coded (:4876-4877)

    @classmethod
    def from_config(cls, config: dict) -> FeatureSizes:
        # configuration_minicpmo.py:244-245: no audio_config means WhisperConfig()'s 80 mel bins.
        return cls(n_mels=int((config.get("audio_config") or {}).get("num_mel_bins", 80)))

    # The reference's own integer arithmetic, kept so other constants round the same way.
    @property
    def first_pad_to(self) -> int:  # streaming_prefill's required_samples for unit 0 (:4849)
        return int(self.first_chunk_ms * self.sample_rate / 1000)

    @property
    def first_take(self) -> int:  # StreamingMelProcessorExact.first_chunk_samples, hop-aligned (:747-749)
        raw = int(round(self.first_chunk_ms * self.sample_rate / 1000))
        return max(self.hop, (raw // self.hop) * self.hop)

    @property
    def first_consumed(self) -> int:  # via get_config()'s effective_first_chunk_ms, truncated to int ms (:4902)
        return int(int(self.first_take / self.sample_rate * 1000.0) * self.sample_rate / 1000)

    @property
    def chunk_take(self) -> int:  # StreamingMelProcessorExact.chunk_samples (:743)
        return int(round(self.chunk_ms * self.sample_rate / 1000))

    @property
    def chunk_consumed(self) -> int:  # streaming_prefill (:4905)
        return int(self.chunk_ms * self.sample_rate / 1000)

    @property
    def context_frames(self) -> int:  # cnn_redundancy_frames (:754-755)
        return max(0, int(self.cnn_redundancy_ms * self.sample_rate / 1000) // self.hop)


class UnitMel(NamedTuple):
    mel: torch.Tensor  # [n_mels, frames] fp32
    prefix_frames: int  # context frames before the unit's own frames, as the encoder is told (0 for unit 0)
    suffix_frames: int


def mel_filters(sizes: FeatureSizes) -> np.ndarray:
    """float64 [1 + n_fft // 2, n_mels]: transformers 4.51 audio_utils.mel_filter_bank(num_frequency_bins=201,
    num_mel_filters=80, min_frequency=0, max_frequency=8000, norm="slaney", mel_scale="slaney") as
    WhisperFeatureExtractor builds it, op for op (so bit for bit)."""
    logstep = 27.0 / np.log(6.4)
    mel_max = 15.0 + np.log(8000.0 / 1000.0) * logstep  # hertz_to_mel(8000): in the log region
    mels = np.linspace(3.0 * 0.0 / 200.0, mel_max, sizes.n_mels + 2)
    freqs = 200.0 * mels / 3.0
    log_region = mels >= 15.0
    freqs[log_region] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[log_region] - 15.0))
    n_freq = 1 + sizes.n_fft // 2
    fft_freqs = np.linspace(0, sizes.sample_rate // 2, n_freq)
    diff = np.diff(freqs)
    slopes = np.expand_dims(freqs, 0) - np.expand_dims(fft_freqs, 1)
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(np.zeros(1), np.minimum(down, up))
    enorm = 2.0 / (freqs[2:sizes.n_mels + 2] - freqs[:sizes.n_mels])
    return filters * np.expand_dims(enorm, 0)


def log_mel(samples: torch.Tensor, window: torch.Tensor, filters: torch.Tensor, dynamic: bool,
            sizes: FeatureSizes) -> torch.Tensor:
    """[n_mels, len // hop] for fp32 samples [len]: MiniCPMAAudioProcessor._torch_extract_fbank_features
    (processing_minicpmo.py:668-703) on a batch of one, its last STFT frame dropped. `filters` is mel_filters()
    in fp32, used transposed as the reference does; `dynamic`: max - dynamic_range_db floor, else log_floor_db."""
    stft = torch.stft(samples[None], sizes.n_fft, hop_length=sizes.hop, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log = torch.clamp(filters.T @ power, min=1e-10).log10()
    if dynamic:
        floor = log.amax(dim=2, keepdim=True).amax(dim=1, keepdim=True) - sizes.dynamic_range_db
    else:  # a no-op at -10 (the clamp already floors log10 there), kept for other floors
        floor = torch.tensor(sizes.log_floor_db, dtype=log.dtype, device=log.device)
    return ((torch.maximum(log, floor) + 4.0) / 4.0)[0]


class UnitFeatures:
    """One conversation's audio input: `push` takes the samples of one unit as streaming_prefill receives them
    and returns that unit's mel frames, or None while the buffer lacks a unit (the reference's "音频不足" failure;
    the samples stay buffered). Host state is plain ints; the samples and the math stay on `device`."""

    def __init__(self, sizes: FeatureSizes, device: torch.device | str = "cpu"):
        self.sizes = sizes
        self.device = torch.device(device)
        self._window = torch.hann_window(sizes.n_fft, device=self.device)
        self._filters = torch.from_numpy(mel_filters(sizes)).to(self.device, torch.float32)
        self._trigger = int(sizes.slide_trigger_s * sizes.sample_rate)
        # The longest buffer: one unit short of the slide trigger, plus one unit.
        self._buffer = torch.zeros(self._trigger + max(sizes.first_take, sizes.chunk_take), device=self.device)
        self.reset()

    def reset(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)  # DuplexCapability.audio_buffer
        self.units = 0  # DuplexCapability.audio_chunk_idx (audio units done)
        self.length = 0  # StreamingMelProcessorExact.buffer's length
        self.base_frame = 0  # global index of the buffer's first frame (base_T)
        self._emitted = 0  # last_emitted_T

    def push(self, samples: np.ndarray) -> UnitMel | None:
        s = self.sizes
        pending = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32).reshape(-1)])
        if self.units == 0 and len(pending) < s.first_pad_to:
            pending = np.concatenate([np.zeros(s.first_pad_to - len(pending), dtype=np.float32), pending])
        need = s.first_take if self.units == 0 else s.chunk_take
        if len(pending) < need:
            self._pending = pending
            return None
        mel = self._process(pending[:need])
        self._pending = pending[s.first_consumed if self.units == 0 else s.chunk_consumed:]
        prefix = 0 if self.units == 0 else s.encoder_context
        self.units += 1
        return UnitMel(mel, prefix, s.encoder_context)

    def _process(self, chunk: np.ndarray) -> torch.Tensor:
        """StreamingMelProcessorExact.process (processing_minicpmo.py:857-910) for a chunk that is not the last."""
        s = self.sizes
        n = len(chunk)
        self._buffer[self.length:self.length + n].copy_(torch.from_numpy(chunk))
        self.length += n
        self._maybe_slide()
        if self.length < s.n_fft:
            raise ValueError(f"audio buffer shorter than n_fft: {self.length} < {s.n_fft}")
        usable = min(self.length, s.truncate_s * s.sample_rate)
        mel = log_mel(self._buffer[:usable], self._window, self._filters,
                      self.length >= s.dynamic_from_s * s.sample_rate, s)
        frames = usable // s.hop  # == mel.shape[-1], known without reading the device
        half = s.n_fft // 2
        stable = 0 if self.length < half else (self.length - half) // s.hop + 1
        stable_global = self.base_frame + min(frames, stable)
        core_start = self._emitted
        core_end = core_start + s.chunk_take // s.hop
        if stable_global < core_end + s.context_frames:
            # The reference emits nothing and streaming_prefill fails; with its unit sizes this never happens
            # (each unit makes exactly the frames it needs stable).
            raise ValueError(f"audio unit too short to emit frames {core_start}..{core_end}")
        start = max(0, min(max(0, core_start - s.context_frames) - self.base_frame, frames))
        end = max(start, min(core_end + s.context_frames - self.base_frame, frames))
        self._emitted = core_end
        return mel[:, start:end]

    def _maybe_slide(self) -> None:
        """_maybe_slide_buffer (processing_minicpmo.py:812-855): at 30 s drop the first 10 s, hop-aligned."""
        s = self.sizes
        if self.length < self._trigger:
            return
        drop = int(s.slide_stride_s * s.sample_rate)
        guard = min(int(s.slide_keep_s * s.sample_rate), self.length - drop)
        drop = min(drop, max(0, self.length - guard))
        drop = (drop // s.hop) * s.hop
        if drop <= 0:
            return
        kept = self.length - drop
        self._buffer[:kept] = self._buffer[drop:self.length].clone()
        self.length = kept
        self.base_frame += drop // s.hop


def reference_mels(samples: np.ndarray, sizes: FeatureSizes, device: torch.device | str = "cpu",
                   dynamic: bool = True) -> list[torch.Tensor]:
    """The mel of a whole recording as DuplexCapability.prepare's reference audio gets it (processor.process_audio
    -> process_audio_batch, processing_minicpmo.py:411-507): 30 s pieces, each zero-padded to 30 s before the
    extraction ("max_length"), so the floor's max and the last frames see the padding, then cut to ceil(len / hop)
    frames. `dynamic`: the extractor's log-norm mode, which is shared state: a fresh processor is dynamic (8 dB),
    one that streamed last sets it by its last buffer's length (see FeatureSizes.dynamic_from_s)."""
    device = torch.device(device)
    window = torch.hann_window(sizes.n_fft, device=device)
    filters = torch.from_numpy(mel_filters(sizes)).to(device, torch.float32)
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    piece = sizes.truncate_s * sizes.sample_rate
    mels = []
    for start in range(0, max(len(samples), 1), piece):
        chunk = torch.from_numpy(samples[start:start + piece]).to(device)
        padded = torch.zeros(piece, device=device)
        padded[:len(chunk)] = chunk
        frames = -(-len(chunk) // sizes.hop)
        mels.append(log_mel(padded, window, filters, dynamic, sizes)[:, :frames])
    return mels
