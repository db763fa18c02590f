"""A voice recording's features, what the stock Step-Audio2 token2wav computes before its
ONNX models read them (tests/golden/voice_features.safetensors, made by packaging/make_voice_golden.py
from torchaudio 2.11, s3tokenizer and stepaudio2 of minicpmo-utils 1.0.7): clips recorded at 24, 16
and 22.05 kHz, each resampled to 16 kHz (the tokenizer's log-mel, the speaker model's Kaldi
filterbank) and to 24 kHz (the flow's prompt mel). The features are logs of float32 FFT power,
whose sums run in an order that follows torch's thread count and the CPU's vector kernels: one
float32 step apart at 1 and 2 threads, up to 1.6e-4 apart (in values up to 16, the quietest bins)
between the CPU that made the golden and an AVX-512 one: within 2.5e-4."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.token2wav.voice_features import prompt_mel, resample, slaney_mel_filters, speaker_fbank, tokenizer_mel

GOLDEN = load_file(str(Path(__file__).parent / "golden" / "voice_features.safetensors"))
RATES = {"r24000": 24000, "r16000": 16000, "r22050": 22050}


def test_the_filter_tables_are_the_references():
    assert torch.equal(slaney_mel_filters(16000, 400, 128), GOLDEN["filters.tokenizer"])
    assert torch.equal(slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0), GOLDEN["filters.flow"])


@pytest.mark.parametrize("clip", RATES)
def test_each_feature_of_a_recording_is_the_references(clip):
    rate, audio = RATES[clip], GOLDEN[f"{clip}.pcm16"].float() / 32768
    speech, flow_audio = resample(audio, rate, 16000), resample(audio, rate, 24000)
    if rate != 16000:
        assert torch.equal(speech, GOLDEN[f"{clip}.speech16k"])
    if rate != 24000:
        assert torch.equal(flow_audio, GOLDEN[f"{clip}.audio24k"])
    features = {"tokenizer_mel": tokenizer_mel(speech, slaney_mel_filters(16000, 400, 128)),
                "fbank": speaker_fbank(speech),
                "prompt_mel": prompt_mel(flow_audio, slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0))}
    for name, values in features.items():
        torch.testing.assert_close(values, GOLDEN[f"{clip}.{name}"], rtol=0, atol=2.5e-4, msg=name)


def test_a_clip_too_short_for_one_filterbank_frame_is_refused():
    with pytest.raises(ValueError, match="at least 400"):
        speaker_fbank(torch.zeros(399))
