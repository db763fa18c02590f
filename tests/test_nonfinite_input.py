"""Non-finite values on the way in: audio samples are replaced where PCM enters the engine
(counted and logged) so the model keeps hearing; a prompt or voice file holding one is refused
naming it (weights: tests/test_mimi_errors.py and the LM test here)."""
import logging
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file, save_file

from app.cli.commands import main
from app.cli.offline import run_offline  # noqa: F401 (imported before a test captures stderr: its progress bar keeps that stream)
from engine.errors import CheckpointError
from engine.families.moshi.lm.personaplex import load_voice
from engine.files.finite import finite_pcm
from engine.files.paths import DEMO_MODEL_DIR, SPEECH_SAMPLE
from engine.loading.models import load_model
from engine.persona import Persona
from engine.session import DuplexSession
from engine.token2wav import Prompt
from tests.mimi_reference import varied_audio

RATE = 24000
NON_FINITE = (np.nan, np.inf, -np.inf)


@pytest.fixture(scope="module")
def model():
    return load_model("demo")


def test_nan_becomes_silence_and_infinities_full_scale():
    pcm = np.array([0.25, np.nan, np.inf, -np.inf, -0.5], np.float32)
    fixed, replaced = finite_pcm(pcm)
    assert replaced == 3 and fixed.tolist() == [0.25, 0.0, 1.0, -1.0, -0.5]
    assert np.isnan(pcm[1])  # the caller's array is left alone
    clean = np.zeros(4, np.float32)
    assert finite_pcm(clean)[0] is clean and finite_pcm(clean)[1] == 0
    wide, replaced = finite_pcm(np.array([1e300, -1e300, 0.5]))  # infinite as float32
    assert replaced == 2 and wide.dtype == np.float32 and wide.tolist() == [1.0, -1.0, 0.5]


def test_a_nan_at_3_s_no_longer_deafens_the_model(tmp_path):
    """The issue's reproduction: two inputs that differ only after non-finite samples at 3 s
    gave bit-identical replies from 3 s on."""
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    assert rate == RATE
    first = speech[: 5 * RATE].copy()
    first[3 * RATE: 3 * RATE + 3] = NON_FINITE
    second = first.copy()
    second[3 * RATE + 3:] = speech[5 * RATE: 7 * RATE - 3]  # other speech after the NaN
    replies = []
    for name, pcm in (("first", first), ("second", second)):
        sf.write(tmp_path / f"{name}.wav", pcm, RATE, subtype="FLOAT")
        assert main(["offline", "--model", "demo", "--input", str(tmp_path / f"{name}.wav"),
                     "--output", str(tmp_path / f"{name}_reply.wav"), "--seed", "3", "--device", "cpu"]) == 0
        replies.append(sf.read(tmp_path / f"{name}_reply.wav", dtype="float32")[0])
    before, after = slice(0, 3 * RATE), slice(3 * RATE, None)
    np.testing.assert_array_equal(replies[0][before], replies[1][before])
    assert not np.array_equal(replies[0][after], replies[1][after]), "the model stopped hearing at the NaN"
    assert all(np.isfinite(r).all() for r in replies)


def test_offline_summary_names_the_count(tmp_path, capsys):
    pcm = varied_audio(13)
    pcm[[100, 2000, 9000]] = NON_FINITE
    sf.write(tmp_path / "in.wav", pcm, RATE, subtype="FLOAT")
    assert main(["offline", "--model", "demo", "--input", str(tmp_path / "in.wav"),
                 "--output", str(tmp_path / "out.wav"), "--device", "cpu"]) == 0
    assert "3 non-finite input samples replaced" in capsys.readouterr().err


def test_codec_replaces_them_as_a_conversation_does(tmp_path, capsys):
    pcm = varied_audio(13)
    pcm[[100, 2000]] = NON_FINITE[:2]
    sf.write(tmp_path / "in.wav", pcm, RATE, subtype="FLOAT")
    assert main(["codec", "--model", "demo", "--input", str(tmp_path / "in.wav"),
                 "--output", str(tmp_path / "out.wav"), "--device", "cpu"]) == 0
    assert "2 non-finite input samples replaced" in capsys.readouterr().err
    assert np.isfinite(sf.read(tmp_path / "out.wav")[0]).all()


def test_the_session_hears_the_replacement_counts_and_logs_it(model, caplog):
    audio = varied_audio(8, seed=2).reshape(8, -1)
    broken = audio.astype(np.float64)
    broken[2, :3] = NON_FINITE
    broken[5, 7] = 1e300  # finite as float64, infinite as the float32 the model hears
    repaired = audio.copy()
    repaired[2, :3] = (0.0, 1.0, -1.0)
    repaired[5, 7] = 1.0
    session = DuplexSession(model, persona=Persona())
    expected = [session.step(frame) for frame in repaired]
    assert session.nonfinite_samples == 0
    session.reset()
    with caplog.at_level(logging.INFO, logger="engine.session"):
        got = [session.step(frame) for frame in broken]
        assert session.nonfinite_samples == 4
        session.reset()
    assert session.nonfinite_samples == 0  # counted per conversation
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a.pcm, b.pcm)
        assert a.text == b.text
    lines = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert lines == ["3 non-finite input samples replaced (NaN -> 0, +-inf -> +-1); later ones are counted",
                     "4 non-finite input samples replaced in this conversation (NaN -> 0, +-inf -> +-1)"]
    session.close()


def _prompt_file(tmp_path, **poison) -> str:
    tensors = {"tokens": torch.arange(6, dtype=torch.int64), "speaker": torch.randn(192),
               "mel": torch.randn(12, 80)}
    for key, index in poison.items():
        tensors[key].view(-1)[index] = float("nan") if key == "speaker" else float("inf")
    path = tmp_path / "prompt.safetensors"
    save_file(tensors, str(path))
    return str(path)


def test_a_token2wav_prompt_holding_nan_or_inf_is_refused_naming_the_file(tmp_path):
    Prompt.read(_prompt_file(tmp_path))
    with pytest.raises(ValueError, match=r"prompt\.safetensors: prompt speaker embedding holds 1 NaN or infinite"):
        Prompt.read(_prompt_file(tmp_path, speaker=17))
    with pytest.raises(ValueError, match=r"prompt\.safetensors: prompt mel holds 1 NaN or infinite"):
        Prompt.read(_prompt_file(tmp_path, mel=500))


@pytest.mark.parametrize("value,dtype", [(float("nan"), torch.float32), (float("-inf"), torch.float32),
                                         (1e6, torch.float16)])  # 1e6 overflows float16
def test_a_voice_file_holding_non_finite_values_is_refused_naming_it(model, tmp_path, value, dtype):
    voice = torch.load(DEMO_MODEL_DIR / "voices" / "DEMO.pt", weights_only=True)
    voice["embeddings"] = voice["embeddings"].float().clone()
    voice["embeddings"].view(-1)[3] = value
    path = tmp_path / "BROKEN.pt"
    torch.save(voice, path)
    with pytest.raises(CheckpointError, match=r"BROKEN\.pt: key embeddings holds 1 NaN or infinite values"):
        load_voice(path, model.cfg, torch.device("cpu"), dtype)


def test_lm_weights_holding_nan_are_refused_naming_file_and_key(tmp_path):
    folder = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "model")
    tensors = load_file(str(folder / "model.safetensors"))
    key = next(k for k, t in tensors.items() if t.dtype.is_floating_point)
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: key {key} holds NaN or infinite values"):
        load_model(str(folder))
