"""The features a voice recording becomes before Step-Audio2's front-end models read it, computed as
the stock token2wav's `_prepare_prompt` computes them (each checked against it by
tests/test_voice_features.py's golden): the speech tokenizer's Whisper-style log-mel (128 bands,
16 kHz), the speaker model's Kaldi filterbank (80 bins, 16 kHz) and the flow's prompt mel (80
bands, 24 kHz, 480-sample hop), with the windowed-sinc resampler that brings a recording to those
rates. Torch and numpy only; every function takes and returns float32 on the CPU."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

FLOAT32_EPSILON = float(torch.finfo(torch.float32).eps)  # Kaldi's floor before the log


def resample(samples: torch.Tensor, rate: int, new_rate: int, zero_crossings: int = 6,
             rolloff: float = 0.99) -> torch.Tensor:
    """[T] at `rate` -> [ceil(T * new_rate / rate)] at `new_rate`: a Hann-windowed sinc filter of
    `zero_crossings` zero crossings each side, cut off at `rolloff` of the lower Nyquist rate; one
    filter per output phase, the kernel made in float64 and used in float32."""
    if rate == new_rate:
        return samples
    gcd = math.gcd(rate, new_rate)
    up, down = new_rate // gcd, rate // gcd
    cutoff = min(up, down) * rolloff
    width = math.ceil(zero_crossings * down / cutoff)
    offsets = torch.arange(-width, width + down, dtype=torch.float64)[None, None] / down
    # The phase term in float32 first, then float64: the order the reference's kernel is made in.
    t = (torch.arange(0, -up, -1)[:, None, None] / up + offsets) * cutoff
    t = t.clamp(-zero_crossings, zero_crossings)
    window = torch.cos(t * math.pi / zero_crossings / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones((), dtype=t.dtype), t.sin() / t) * (window * (cutoff / down))
    padded = F.pad(samples.float()[None], (width, width + down))
    out = F.conv1d(padded[:, None], kernel.float(), stride=down).transpose(1, 2).reshape(-1)
    return out[:math.ceil(up * samples.numel() / down)]


def slaney_mel_filters(rate: int, n_fft: int, bands: int, low_hz: float = 0.0, high_hz: float | None = None
                       ) -> torch.Tensor:
    """[bands, 1 + n_fft // 2] float32: triangles equally spaced on the Slaney mel scale (linear to
    1 kHz, logarithmic above), each scaled to unit area, rounded to float32 before the scaling as
    librosa's filters are."""
    high_hz = rate / 2 if high_hz is None else high_hz
    f_sp, log_hz, log_step = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    log_mel = log_hz / f_sp

    def to_mel(hz: float) -> float:
        return hz / f_sp if hz < log_hz else log_mel + math.log(hz / log_hz) / log_step

    mels = np.linspace(to_mel(low_hz), to_mel(high_hz), bands + 2)
    hz = f_sp * mels
    above = mels >= log_mel
    hz[above] = log_hz * np.exp(log_step * (mels[above] - log_mel))
    fft_hz = np.fft.rfftfreq(n=n_fft, d=1.0 / rate)
    gaps = np.diff(hz)
    ramps = np.subtract.outer(hz, fft_hz)
    rising, falling = -ramps[:-2] / gaps[:-1, None], ramps[2:] / gaps[1:, None]
    weights = np.maximum(0, np.minimum(rising, falling)).astype(np.float32)
    weights = (weights * (2.0 / (hz[2:] - hz[:-2]))[:, None]).astype(np.float32)
    return torch.from_numpy(weights)


def tokenizer_mel(samples16k: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """The speech tokenizer's input [128, T // 160]: a centred 400-point STFT every 160 samples
    (the last frame dropped), power through `filters` (slaney_mel_filters(16000, 400, 128)),
    log10 floored at 1e-10 and at 8 below the clip's peak, then (x + 4) / 4."""
    stft = torch.stft(samples16k.float(), 400, 160, window=torch.hann_window(400), return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log = torch.clamp(filters @ power, min=1e-10).log10()
    return (torch.maximum(log, log.max() - 8.0) + 4.0) / 4.0


def speaker_fbank(samples16k: torch.Tensor, bins: int = 80) -> torch.Tensor:
    """Kaldi's log mel filterbank [frames, bins] with its defaults and no dither: 25 ms frames every
    10 ms that fit whole, each with its mean removed, pre-emphasis 0.97 (the first sample repeated
    before it), Povey's window, zero-padded to 512 points, power spectrum, `bins` triangles on
    Kaldi's mel scale from 20 Hz to Nyquist, log floored at float32's epsilon."""
    size, shift, padded = 400, 160, 512
    x = samples16k.float()
    if x.numel() < size:
        raise ValueError(f"{x.numel()} samples: Kaldi's filterbank needs at least {size}")
    frames = x.as_strided((1 + (x.numel() - size) // shift, size), (shift, 1))
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = F.pad(frames[None], (1, 0), mode="replicate")[0, :, :-1]
    frames = frames - 0.97 * previous
    frames = frames * torch.hann_window(size, periodic=False).pow(0.85)
    power = torch.fft.rfft(F.pad(frames, (0, padded - size))).abs().pow(2.0)
    return torch.max(power @ _kaldi_mel_banks(bins, padded, 16000.0).T,
                     torch.tensor(FLOAT32_EPSILON)).log()


def _kaldi_mel_banks(bins: int, padded: int, rate: float, low_hz: float = 20.0) -> torch.Tensor:
    """[bins, padded // 2 + 1] float32: triangles on Kaldi's mel scale (1127 ln(1 + f / 700)), the
    Nyquist bin's column zero."""
    def to_mel(hz):
        return 1127.0 * (math.log(1.0 + hz / 700.0) if isinstance(hz, float) else (1.0 + hz / 700.0).log())

    low, high = to_mel(low_hz), to_mel(rate / 2)
    delta = (high - low) / (bins + 1)
    index = torch.arange(bins).unsqueeze(1)
    left, center, right = (low + (index + k) * delta for k in (0.0, 1.0, 2.0))
    mel = to_mel(rate / padded * torch.arange(padded / 2)).unsqueeze(0)
    banks = torch.max(torch.zeros(1), torch.min((mel - left) / (center - left), (right - mel) / (right - center)))
    return F.pad(banks, (0, 1))


def prompt_mel(samples24k: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """The flow's prompt mel [frames, 80]: the clip reflected 720 samples at each end, a 1920-point
    STFT every 480 samples (Hann, not centred), magnitude (with 1e-9 inside the root) through
    `filters` (slaney_mel_filters(24000, 1920, 80, 0, 8000)), natural log floored at 1e-5."""
    n_fft, hop = 1920, 480
    x = F.pad(samples24k.float()[None, None], ((n_fft - hop) // 2,) * 2, mode="reflect")[0]
    spec = torch.view_as_real(torch.stft(x, n_fft, hop_length=hop, win_length=n_fft, window=torch.hann_window(n_fft),
                                         center=False, return_complex=True))
    magnitude = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    return torch.log(torch.clamp(filters @ magnitude, min=1e-5))[0].T
