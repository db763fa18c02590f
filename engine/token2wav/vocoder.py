"""Step-Audio2's causal HiFT vocoder, whole-signal and streaming (CosyVoice3 `CausalHiFTGenerator`
+ `CausalConvRNNF0Predictor`); the stream (the stock `BoundedVocoder`) is
`vocoder_stream.StreamingVocoder`.

Mel [1, 80, T] -> F0 per frame (float64) -> a harmonic excitation at 24 kHz (the neural source
filter) -> a causal upsampling conv net fed with the excitation's STFT -> magnitude and phase ->
ISTFT -> audio [1, T * 480]. Randomness: the stock model draws, when it is built, an initial phase
per harmonic and a table of uniform noise (300 s x 9 harmonics) from torch's global generator;
inference then reads the table by absolute sample position and draws nothing. Ours draws the same
two tensors in the same order from `generator` (the global one if None), so a generator seeded
like the global one before the stock model was built gives identical audio.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import weight_norm

from ..ops.host_rows import wrapped_rows
from .vocoder_layers import CausalConv1d, CausalF0Predictor, DownsampleConv1d, ResBlock, UpsampleConv1d

NOISE_TABLE_SAMPLES = 300 * 24000
"""Length of the stock noise table (300 s at 24 kHz); positions past it wrap around."""


def istft(spec: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor) -> torch.Tensor:
    """torch.istft(spec, n_fft, hop, n_fft, window) (centred, one-sided) by the very same steps, bit for
    bit, minus its check that the window envelope never vanishes: that check reads a value back to
    the host, a device sync on every streamed chunk. The constructor checks the envelope once."""
    frames = torch.fft.irfft(spec.transpose(1, 2), n=n_fft, dim=-1) * window  # [B, frames, n_fft]
    length = n_fft + hop * (frames.shape[1] - 1)
    audio = torch.ops.aten.unfold_backward(frames, [frames.shape[0], length], 1, n_fft, hop)  # overlap-add
    half = n_fft // 2
    return audio[:, half:-half] / _envelope(window, frames.shape[1], n_fft, hop)


def _envelope(window: torch.Tensor, count: int, n_fft: int, hop: int) -> torch.Tensor:
    """The overlap-added squared window of `count` frames, centre-trimmed: [1, hop * (count - 1)]."""
    length = n_fft + hop * (count - 1)
    envelope = torch.ops.aten.unfold_backward(window.pow(2).expand(1, count, n_fft), [1, length], 1, n_fft, hop)
    return envelope[:, n_fft // 2:-(n_fft // 2)]


class HarmonicSource(nn.Module):
    """F0 [B, T] (Hz per mel frame) -> excitation [B, 1, T * hop]: F0 and its harmonics as sines
    (voiced frames only) plus uniform noise from the fixed table, merged by a linear layer + tanh.
    Named `m_source` in the generator, like the stock SourceModuleHnNSF (only `l_linear` has weights)."""

    def __init__(self, sampling_rate: int, hop: int, harmonics: int, sine_amp: float, noise_std: float,
                 voiced_threshold: float, noise_samples: int, generator: torch.Generator | None):
        super().__init__()
        self.sampling_rate, self.hop, self.harmonics = sampling_rate, hop, harmonics
        self.sine_amp, self.noise_std, self.voiced_threshold = sine_amp, noise_std, voiced_threshold
        # Drawn before anything else, in the stock order. The initial phases never reach the audio
        # (stock adds them to sample 0 only, and reads each frame's increment at the frame's middle);
        # they are drawn so that the table comes from the same place in the generator's stream.
        torch.rand(1, harmonics, generator=generator)
        noise = torch.rand(noise_samples, harmonics, generator=generator)
        self.register_buffer("noise", noise, persistent=False)  # not in hift.pt: built, not trained
        self.l_linear = nn.Linear(harmonics, 1)

    def increments(self, f0: torch.Tensor) -> torch.Tensor:
        """Phase advance per sample in cycles, fractional part [B, T, H]."""
        harmonics = torch.arange(1, self.harmonics + 1, device=f0.device, dtype=f0.dtype)
        return (f0[:, :, None] * harmonics / self.sampling_rate).remainder(1)

    def noise_at(self, first: int | torch.Tensor, count: int) -> torch.Tensor:
        """Table rows for absolute samples first.., wrapping at the end of the table as the stock
        stream does (the stock whole-signal path fails past it instead). A stream gives `first`
        as a device counter ([1] int64): the rows are gathered where it points, so the same
        work (one captured graph) serves every position of a stream."""
        size = self.noise.shape[0]
        if isinstance(first, torch.Tensor):
            return wrapped_rows(self.noise, first, count)
        first %= size
        if first + count <= size:
            return self.noise[first:first + count]
        return self.noise.index_select(0, torch.arange(first, first + count, device=self.noise.device) % size)

    def excitation(self, sine: torch.Tensor, f0: torch.Tensor, first_sample: int | torch.Tensor,
                   harmonics_major: bool = False) -> torch.Tensor:
        """Per-frame sines [B, T, H] and F0 [B, T] -> merged excitation [B, 1, T * hop]."""
        sine = sine.repeat_interleave(self.hop, dim=1)
        voiced = (f0[:, :, None] > self.voiced_threshold).to(f0.dtype).repeat_interleave(self.hop, dim=1)
        # Noise as loud as the sines where unvoiced, faint where voiced.
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        noise = self.noise_at(first_sample, sine.shape[1]).to(f0.device, f0.dtype)
        mixed = sine * self.sine_amp * voiced + noise_amp * noise
        if harmonics_major:
            # Same values, laid out [B, H, T * hop] in memory as the stock whole-signal path leaves
            # them: the linear layer's sums round differently per layout, by a last bit that the
            # conv net then amplifies about a hundredfold.
            mixed = mixed.transpose(1, 2).contiguous().transpose(1, 2)
        return torch.tanh(self.l_linear(mixed)).transpose(1, 2)

    def forward(self, f0: torch.Tensor) -> torch.Tensor:
        """A whole signal, as the stock generator computes it: the running phase is a float32
        cumulative sum over frames. Stock computes it per sample, then keeps each frame's middle
        sample and repeats it over the frame, which are the same numbers as computing per frame."""
        phase = torch.cumsum(self.increments(f0), dim=1) * 2 * math.pi * self.hop
        return self.excitation(torch.sin(phase), f0, 0, harmonics_major=True)

    def stream(self, f0: torch.Tensor, phase: torch.Tensor, first_sample: torch.Tensor) -> torch.Tensor:
        """The next frames of a stream, as the stock BoundedVocoder computes them: the phase is
        carried in float64 cycles modulo 1 (`phase` [1, 1, H], updated in place), so it stays exact
        however long the stream runs; `first_sample` ([1] int64, on the device) is the absolute
        sample of the first frame, where the noise table is read."""
        cycles = self.increments(f0).double().cumsum(dim=1) * self.hop + phase
        phase.copy_(cycles[:, -1:].remainder(1))
        sine = (cycles.remainder(1) * (2 * math.pi)).sin().to(f0.dtype)
        return self.excitation(sine, f0, first_sample)


class CausalHiFTGenerator(nn.Module):
    """The vocoder's modules and weights (keys as in the official `hift.pt`). Defaults: the
    official Step-Audio2 / CosyVoice3 configuration."""

    def __init__(self, in_channels: int = 80, base_channels: int = 512, nb_harmonics: int = 8,
                 sampling_rate: int = 24000, nsf_alpha: float = 0.1, nsf_sigma: float = 0.003,
                 nsf_voiced_threshold: float = 10, upsample_rates: Sequence[int] = (8, 5, 3),
                 upsample_kernel_sizes: Sequence[int] = (16, 11, 7), istft_n_fft: int = 16, istft_hop_len: int = 4,
                 resblock_kernel_sizes: Sequence[int] = (3, 7, 11),
                 resblock_dilation_sizes: Sequence[Sequence[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
                 source_resblock_kernel_sizes: Sequence[int] = (7, 7, 11),
                 source_resblock_dilation_sizes: Sequence[Sequence[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
                 lrelu_slope: float = 0.1, audio_limit: float = 0.99, conv_pre_look_right: int = 4,
                 f0_cond_channels: int = 512, noise_samples: int = NOISE_TABLE_SAMPLES,
                 generator: torch.Generator | None = None):
        super().__init__()
        stages = len(upsample_rates)
        if sampling_rate == 22050:
            raise ValueError("22.05 kHz HiFT uses the older sine generator, which this vocoder does not implement")
        if not (len(upsample_kernel_sizes) == len(source_resblock_kernel_sizes)
                == len(source_resblock_dilation_sizes) == stages):
            raise ValueError("upsample rates/kernels and source resblock kernels/dilations need one entry per stage")
        if len(resblock_kernel_sizes) != len(resblock_dilation_sizes):
            raise ValueError("resblock kernels and dilations need one entry per resblock")
        self.upsample_rates = tuple(upsample_rates)
        self.n_fft, self.istft_hop = istft_n_fft, istft_hop_len
        self.stft_per_frame = math.prod(upsample_rates)  # STFT frames per mel frame
        self.frame_samples = self.stft_per_frame * istft_hop_len  # audio samples per mel frame
        self.lrelu_slope, self.audio_limit = lrelu_slope, audio_limit
        self.conv_pre_look_right = conv_pre_look_right
        self.per_stage = len(resblock_kernel_sizes)

        # Built first so that its draws come first, as in the stock model.
        self.m_source = HarmonicSource(sampling_rate, self.frame_samples, nb_harmonics + 1, nsf_alpha, nsf_sigma,
                                       nsf_voiced_threshold, noise_samples, generator)
        self.conv_pre = weight_norm(CausalConv1d(in_channels, base_channels, conv_pre_look_right + 1, right=True))
        channels = [base_channels // 2 ** i for i in range(stages + 1)]
        self.ups = nn.ModuleList(
            weight_norm(UpsampleConv1d(channels[i], channels[i + 1], k, u))
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)))
        # The excitation's STFT (real and imaginary bins) joins each stage at that stage's rate.
        self.source_downs = nn.ModuleList()
        for i in range(stages):
            stride = math.prod(upsample_rates[i + 1:])
            self.source_downs.append(CausalConv1d(istft_n_fft + 2, channels[i + 1], 1) if stride == 1 else
                                     DownsampleConv1d(istft_n_fft + 2, channels[i + 1], 2 * stride, stride))
        self.source_resblocks = nn.ModuleList(
            ResBlock(channels[i + 1], k, tuple(d))
            for i, (k, d) in enumerate(zip(source_resblock_kernel_sizes, source_resblock_dilation_sizes)))
        self.resblocks = nn.ModuleList(
            ResBlock(channels[i + 1], k, tuple(d))
            for i in range(stages) for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes))
        self.conv_post = weight_norm(CausalConv1d(channels[-1], istft_n_fft + 2, 7))
        window = torch.hann_window(istft_n_fft, periodic=True, dtype=torch.float64).float()  # as scipy's
        if _envelope(window, 2 * istft_n_fft // istft_hop_len + 1, istft_n_fft, istft_hop_len).min() < 1e-11:
            raise ValueError(f"a Hann window of {istft_n_fft} at hop {istft_hop_len} cannot be inverted (NOLA)")
        self.register_buffer("stft_window", window, persistent=False)
        self.f0_predictor = CausalF0Predictor(in_channels, f0_cond_channels)

    @classmethod
    def from_config(cls, config, generator: torch.Generator | None = None) -> CausalHiFTGenerator:
        """From a dataclass whose fields are this constructor's arguments (engine.token2wav.token2wav_config)."""
        return cls(**dataclasses.asdict(config), generator=generator)

    def predict_f0(self, mel: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """F0 [B, T] in mel's dtype, computed in float64: its error would grow into phase error."""
        return self.f0_predictor(mel.double(), finalize).to(mel.dtype)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """A whole signal: mel [B, C, T] -> audio [B, T * hop]."""
        return self.decode(mel, self.m_source(self.predict_f0(mel)))

    def decode(self, mel: torch.Tensor, source: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        """mel [B, C, T] and excitation [B, 1, T * hop] -> audio [B, T * hop]. With finalize=False
        the last conv_pre_look_right frames are look-ahead only and the frame before them is held
        back (its ISTFT overlap is incomplete): (T - look_right - 1) * hop samples come out."""
        spec = torch.stft(source.squeeze(1), self.n_fft, self.istft_hop, self.n_fft, window=self.stft_window,
                          return_complex=True)
        s = torch.cat([spec.real, spec.imag], dim=1)
        x = self.conv_pre(mel, padded=finalize)
        if not finalize:
            s = s[..., :-self.conv_pre_look_right * self.stft_per_frame]
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, self.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # one more frame: the STFT's centred last frame
            x = x + self.source_resblocks[i](self.source_downs[i](s))
            blocks = self.resblocks[i * self.per_stage:(i + 1) * self.per_stage]
            xs = blocks[0](x)
            for block in blocks[1:]:
                xs = xs + block(x)
            x = xs / self.per_stage
        x = self.conv_post(F.leaky_relu(x))  # torch's default slope here, as trained
        bins = self.n_fft // 2 + 1
        magnitude = torch.exp(x[:, :bins]).clamp(max=1e2)
        phase = torch.sin(x[:, bins:])
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        audio = istft(spec, self.n_fft, self.istft_hop, self.stft_window)
        if not finalize:
            audio = audio[:, :-self.frame_samples]
        return audio.clamp(-self.audio_limit, self.audio_limit)
