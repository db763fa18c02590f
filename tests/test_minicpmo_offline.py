"""MiniCPM-o through the app's own paths: a folder in the official layout is recognised as the
family, planned for and loaded; `duplexcadence offline` runs it on a file at another rate (the
reply has the input's length, the transcript the units' text after the forced listening); a
folder that is wrong is refused in one line naming the file, before its weights are read."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cli.commands import main
from engine.errors import CheckpointError
from engine.loading.models import load_model, plan_memory

TINY = Path(__file__).parent / "golden" / "minicpmo_tiny"


@pytest.fixture
def folder(tmp_path):
    return Path(shutil.copytree(TINY, tmp_path / "MiniCPM-o-4_5"))


def test_a_folder_in_the_official_layout_is_this_family(folder):
    plan = plan_memory(folder, None, "cpu")
    model = load_model(folder, device="cpu")
    assert model.family == "minicpmo" and (model.input_rate, model.output_rate, model.step_samples) == (16000, 24000,
                                                                                                      16000)
    read = sum(t.numel() for t in model.weights_by_name.values())
    assert plan.weight_bytes == 4 * read  # the plan counts what the loader reads (float32 on the CPU)
    assert not any(key.startswith(("vpm.", "resampler.")) for key in model.weights_by_name)
    assert "text only" in model.notice  # no token2wav tail in this folder


def test_offline_answers_a_file_with_the_units_text(folder, tmp_path, capsys):
    pcm = np.random.default_rng(0).normal(0, 0.1, 44100 * 6).astype(np.float32)  # 6 s at 44.1 kHz
    sf.write(tmp_path / "in.wav", pcm, 44100)
    out, transcript = tmp_path / "out.wav", tmp_path / "out.json"
    assert main(["offline", "--model", str(folder), "--input", str(tmp_path / "in.wav"), "--output", str(out),
                 "--transcript", str(transcript), "--device", "cpu", "--seed", "3"]) == 0
    reply, rate = sf.read(out, dtype="float32")
    assert abs(len(reply) / rate - 6.0) < 0.08
    words = json.loads(transcript.read_text())["words"]
    assert words and min(w["start"] for w in words) >= 3.0  # the first three units listen (force_listen_count)
    assert "MiniCPM-o: spoke in" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "model-00002-of-00003.safetensors").unlink(), "model-00002-of-00003.safetensors: file not found"),
    (lambda f: _config(f, hidden_size=8), "has shape"),
    (lambda f: _config(f, tts_config={**json.loads((f / "config.json").read_text())["tts_config"],
                                      "num_hidden_layers": 3}), "lacks tts.model.layers.2"),
    (lambda f: (f / "model.safetensors.index.json").write_text('{"weight_map": {"llm.x": "../../etc/passwd"}}'),
     "outside the model's folder"),
    (lambda f: (f / "tokenizer_config.json").unlink(), "tokenizer_config.json"),
])
def test_a_damaged_folder_is_refused_in_one_line_naming_the_file(folder, damage, message):
    damage(folder)
    with pytest.raises((CheckpointError, ValueError)) as error:
        load_model(folder, device="cpu")
    assert message in str(error.value) and "\n" not in str(error.value)


def _config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_the_weights_are_checked_before_any_is_read(folder, monkeypatch):
    """A shape the config does not imply fails from the headers: no tensor is read."""
    import engine.families.minicpmo.layout as layout
    _config(folder, intermediate_size=32)
    read = []
    monkeypatch.setattr(layout, "safe_open", lambda *a, **k: read.append(a) or pytest.fail("a tensor was read"))
    with pytest.raises(CheckpointError, match="mlp.gate_proj.weight has shape"):
        load_model(folder, device="cpu", dtype=torch.float32)
    assert not read
