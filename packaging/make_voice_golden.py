"""Writes tests/golden/voice_features.safetensors: what the stock Step-Audio2 token2wav's
`_prepare_prompt` (minicpmo-utils 1.0.7) computes from a voice recording before its ONNX models
read it, on three clips of assets/speech_sample.wav at 24, 16 and 22.05 kHz: the resampling to
16 and 24 kHz (torchaudio's Resample), the speech tokenizer's log-mel (s3tokenizer's
log_mel_spectrogram and its filter table), the speaker model's filterbank (torchaudio's Kaldi
fbank) and the flow's prompt mel (stepaudio2's mel_spectrogram, librosa's filters).

The reference's modules must be importable; torchaudio 2.11's pure-Python parts are enough (its
compiled libraries need CUDA's; with them deleted it runs these on torch 2.13):
  pip install --no-deps --target /tmp/ref torchaudio==2.11.1 minicpmo-utils==1.0.7 onnx librosa
  rm /tmp/ref/torchaudio/lib/*.so
  PYTHONPATH=/tmp/ref:. python3 packaging/make_voice_golden.py"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch
import torchaudio
import torchaudio.compliance.kaldi as kaldi
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.stock_token2wav import stock  # noqa: E402

OUT = ROOT / "tests" / "golden" / "voice_features.safetensors"
CLIPS = {"r24000": 24000, "r16000": 16000, "r22050": 22050}
SECONDS = 3.0


def clip(rate: int) -> np.ndarray:
    """The sample's first SECONDS at `rate`, rounded to int16 as a recording at that rate holds it."""
    speech, source = sf.read(ROOT / "assets" / "speech_sample.wav", dtype="float64")
    speech = speech[: int(SECONDS * source)]
    if rate != source:
        speech = soxr.resample(speech, source, rate, quality="HQ")
    return np.clip(np.round(speech * 32768), -32768, 32767).astype(np.int16)


def main() -> None:
    import s3tokenizer.utils as s3

    mel_24k = stock("flashcosyvoice.utils.audio").mel_spectrogram
    out = {"filters.tokenizer": s3._mel_filters("cpu", 128).contiguous()}
    for name, rate in CLIPS.items():
        pcm = clip(rate)
        audio = torch.from_numpy(pcm.astype(np.float32) / 32768)[None]  # torchaudio.load's [channels, T]
        speech = torchaudio.transforms.Resample(rate, 16000)(audio)[0] if rate != 16000 else audio[0]
        flow_audio = torchaudio.transforms.Resample(rate, 24000)(audio) if rate != 24000 else audio
        out[f"{name}.pcm16"] = torch.from_numpy(pcm)
        if rate != 16000:  # the clip itself at its own rate: nothing to record
            out[f"{name}.speech16k"] = speech.contiguous()
        if rate != 24000:
            out[f"{name}.audio24k"] = flow_audio[0].contiguous()
        out[f"{name}.tokenizer_mel"] = s3.log_mel_spectrogram(speech, n_mels=128).contiguous()
        out[f"{name}.fbank"] = kaldi.fbank(speech[None], num_mel_bins=80, dither=0, sample_frequency=16000).contiguous()
        out[f"{name}.prompt_mel"] = mel_24k(flow_audio).transpose(1, 2).squeeze(0).contiguous()
    out["filters.flow"] = stock("flashcosyvoice.utils.audio").mel_basis["8000_cpu"].contiguous()
    save_file(out, str(OUT), metadata={"torchaudio": torchaudio.__version__, "seconds": str(SECONDS),
                                       "reference": "minicpmo-utils 1.0.7 stepaudio2.token2wav._prepare_prompt"})
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
