"""MiniCPM-o speaking with a voice made from a recording (engine.token2wav.voice_prompt,
engine.families.minicpmo.voices): the token2wav folder's ONNX front end run by onnxruntime, and
the recording's rows in the LLM's system prompt. The Hub's speech tokenizer and CAM++ model are
hundreds of MB and cannot be fetched here: tests/golden/voice_onnx holds two tiny real ONNX models
with their inputs and outputs (packaging/make_voice_onnx.py), whose computation is repeated here
in numpy to show what the front end fed them. The features themselves are checked against the
stock runtime's by tests/test_voice_features.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cli.commands import main
from bench.stock_token2wav import FLOW_YAML, VOCODER_YAML, write_model_dir
from engine.families.minicpmo.conversation import MiniCPMOConversation, system_prompt
from engine.families.minicpmo.model import TAIL_FOLDER, load
from engine.families.minicpmo.voices import VOICES
from engine.files.paths import SPEECH_SAMPLE
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.token2wav.voice_features import resample, slaney_mel_filters, speaker_fbank, tokenizer_mel
from engine.token2wav.voice_prompt import FILES, Recording, VoiceFrontEnd
from tests.test_token2wav_parity import SMALL_ENCODER, SMALL_VOCODER, _small

pytest.importorskip("onnxruntime")
GOLDEN = Path(__file__).parent / "golden"
ONNX = GOLDEN / "voice_onnx"
VOICE = next(iter(VOICES))


def with_voice(folder: Path) -> Path:
    """The tiny checkpoint copied to `folder`, with a small random tail and the tiny front end in its
    assets/token2wav."""
    folder = Path(shutil.copytree(GOLDEN / "minicpmo_tiny", folder))
    tail = folder / TAIL_FOLDER
    tail.mkdir(parents=True)
    encoder = {k: v for k, v in SMALL_ENCODER.items() if not k.startswith("vocab_size")}  # the TTS's 6561 tokens
    write_model_dir(tail, 0, _small(FLOW_YAML, encoder), _small(VOCODER_YAML, SMALL_VOCODER))
    for name in FILES:
        shutil.copy(ONNX / name, tail / name)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return with_voice(tmp_path_factory.mktemp("voices") / "MiniCPM-o-4_5")


def test_the_front_end_feeds_each_onnx_model_the_recordings_features():
    recording = Recording.read(SPEECH_SAMPLE, 7.0)
    prompt = VoiceFrontEnd(ONNX).prompt(recording)
    assert prompt.tokens.shape == (1, 175) and prompt.mel.shape == (1, 350, 80)  # 25 tokens and 50 frames a second
    speech = resample(torch.from_numpy(sf.read(SPEECH_SAMPLE, frames=7 * 24000, dtype="float32")[0]), 24000, 16000)
    w = np.load(ONNX / "weights.npz")
    mel = tokenizer_mel(speech, slaney_mel_filters(16000, 400, 128)).double().numpy()
    windows = mel[:, : mel.shape[1] // 4 * 4].reshape(128, -1, 4)
    codes = np.einsum("ckj,knj->cn", w["conv"].astype(np.float64), windows)
    top = np.sort(codes, axis=0)
    clear = top[-1] - top[-2] > 1e-3  # away from a near tie, float32 and float64 sums pick the same code
    assert clear.mean() > 0.9
    assert np.array_equal(prompt.tokens[0].numpy()[clear], codes.argmax(axis=0)[clear])
    fbank = speaker_fbank(speech).double()
    expected = ((fbank - fbank.mean(dim=0)) ** 2).mean(dim=0).numpy() @ w["speaker"]
    # float32 sums of terms near the result's largest: their error scales with that, not with each element
    scale = np.abs(expected).max()
    np.testing.assert_allclose(prompt.speaker[0].numpy(), expected, rtol=1e-4, atol=1e-5 * scale)


def test_a_model_with_the_front_end_speaks_with_its_voice(folder, tmp_path, capsys):
    model = load(folder, None, torch.device("cpu"), torch.float32)
    assert list(model.voices) == [VOICE] and "text only" not in model.notice
    conversation = MiniCPMOConversation(model, torch.Generator().manual_seed(0), RuntimeOptions(), Persona())
    assert conversation.voices == [VOICE]
    conversation.reset(RuntimeOptions(), lambda: False, None)
    prefix, suffix = (len(model.tokens.encode(text)) for text in system_prompt(""))
    assert conversation.units.system_length == prefix + 70 + suffix  # 7 s of the voice: 10 rows a second
    assert conversation.stream is not None and torch.equal(conversation.prompt.tokens,
                                                           model.voices[VOICE].prompt.tokens)
    pcm = np.random.default_rng(0).normal(0, 0.1, 16000 * 8).astype(np.float32)
    sf.write(tmp_path / "in.wav", pcm, 16000)
    out = tmp_path / "out.wav"
    assert main(["offline", "--model", str(folder), "--input", str(tmp_path / "in.wav"), "--output", str(out),
                 "--device", "cpu", "--seed", "3"]) == 0
    reply, _ = sf.read(out, dtype="float32")
    assert np.abs(reply[3 * 24000:]).max() > 0.01  # after the forced listening, it speaks aloud
    assert "MiniCPM-o: spoke in" in capsys.readouterr().err


def test_a_voice_is_chosen_by_name_and_an_unknown_one_refused(folder):
    model = load(folder, None, torch.device("cpu"), torch.float32)
    conversation = MiniCPMOConversation(model, None, RuntimeOptions(), Persona(voice=VOICE))
    with pytest.raises(ValueError) as error:
        conversation.check_persona(Persona(voice="Nobody"))
    assert f"has no voice 'Nobody' (have: {VOICE})" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("damage, reason", [
    (lambda tail: (tail / "campplus.onnx").unlink(), "has no campplus.onnx to make a voice with"),
    (lambda tail: (tail / "speech_tokenizer_v2_25hz.onnx").write_bytes(b"not a graph"),
     "speech_tokenizer_v2_25hz.onnx: not an ONNX model onnxruntime can run"),
    # A graph whose weights are "external data" outside the model's folder: never read.
    (lambda tail: (shutil.copy(ONNX / "escaping.onnx", tail / "campplus.onnx"),
                   (tail.parent / "outside.bin").write_bytes(bytes(80 * 192 * 4))), "escapes"),
])
def test_without_a_working_front_end_it_answers_in_text_and_says_why(folder, tmp_path, damage, reason):
    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    damage(copy / TAIL_FOLDER)
    model = load(copy, None, torch.device("cpu"), torch.float32)
    assert not model.voices and "text only" in model.notice and reason in model.notice


@pytest.mark.parametrize("samples, rate, message", [
    (np.zeros(8000, np.float32), 16000, "0.5 s; a voice recording needs at least 1 s"),
    (np.zeros(16000 * 31, np.float32), 16000, "a voice recording is 1-30 s"),
])
def test_a_recording_that_cannot_be_a_voice_is_refused_in_one_line(tmp_path, samples, rate, message):
    path = tmp_path / "voice.wav"
    sf.write(path, samples, rate)
    with pytest.raises(ValueError) as error:
        Recording.read(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_a_stereo_recording_is_heard_as_the_reference_hears_it(tmp_path):
    """The tokenizer and speaker model take the first channel (s3tokenizer.load_audio); the flow's
    mel and the LLM's rows the channels' mean (torchaudio's mean, librosa's mono)."""
    rng = np.random.default_rng(1)
    stereo = rng.normal(0, 0.1, (22050 * 2, 2)).astype(np.float32)
    sf.write(tmp_path / "stereo.wav", stereo, 22050, subtype="FLOAT")
    recording = Recording.read(tmp_path / "stereo.wav", 1.5)
    assert recording.rate == 22050 and len(recording.first) == round(1.5 * 22050)
    assert torch.equal(recording.first, torch.from_numpy(stereo[: len(recording.first), 0]))
    torch.testing.assert_close(recording.mean, torch.from_numpy(stereo[: len(recording.first)].mean(axis=1)))
