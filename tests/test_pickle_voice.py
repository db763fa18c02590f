"""A `.pt` file holding more than tensors (an object, or code its unpickling would run) is
refused in one line naming the file and what it holds, never with torch's advice to turn
the check off, and nothing in it runs. The voice prompt through the installed command."""
import builtins
from pathlib import Path

import pytest
import torch

from engine.errors import CheckpointError
from engine.families.moshi.lm.personaplex import load_voice
from engine.families.moshi.model import read_lm_checkpoint
from engine.token2wav.token2wav_loading import read_pt
from tests.hostile_files import demo_copy
from tests.installed_cli import duplexcadence, one_line, speech_clip


class Speaker:
    """An object, not a tensor: the weights-only reader must not build it."""

    def __init__(self):
        self.name = "someone"


class Payload:
    """Unpickling it would call exec on this code: it writes the marker file if it runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _voice(**extra) -> dict:
    return {"embeddings": torch.zeros(3, 1, 1, 32), "cache": torch.zeros(1, 17, 4, dtype=torch.long), **extra}


@pytest.fixture
def hostile(tmp_path):
    """A demo copy with voice prompts OBJECT (a class instance inside) and CODE (a __reduce__
    payload), and the marker file the payload would write."""
    folder = demo_copy(tmp_path / "demo")
    marker = tmp_path / "payload-ran"
    torch.save(_voice(speaker=Speaker()), folder / "voices" / "OBJECT.pt")
    torch.save(_voice(extra=Payload(marker)), folder / "voices" / "CODE.pt")
    return folder, marker


@pytest.mark.parametrize("voice,found", [("OBJECT", "Speaker"), ("CODE", "exec")])
def test_offline_refuses_a_pickled_voice_prompt_in_one_line(hostile, tmp_path, voice, found):
    folder, marker = hostile
    done = duplexcadence("offline", "--model", folder, "--device", "cpu", "--voice", voice, "--input",
                         speech_clip(tmp_path / "in.wav"), "--output", tmp_path / "reply.wav", timeout=120)
    line = one_line(done.stderr)
    assert done.returncode == 2 and f"{voice}.pt: holds code or objects that are not plain tensors" in line
    assert found in line and "weights_only" not in done.stderr
    assert not marker.exists() and not (tmp_path / "reply.wav").exists()


def test_the_engine_says_the_same_and_runs_nothing(hostile):
    folder, marker = hostile
    model_cfg = read_lm_checkpoint(folder, layout_only=True).cfg
    for name in ("OBJECT", "CODE"):
        with pytest.raises(CheckpointError) as refused:
            load_voice(folder / "voices" / f"{name}.pt", model_cfg, torch.device("cpu"), torch.float32)
        assert "\n" not in str(refused.value) and "not plain tensors" in str(refused.value)
    assert not marker.exists()


def test_a_pickled_token2wav_file_is_refused_in_one_line(tmp_path):
    marker = tmp_path / "payload-ran"
    path = tmp_path / "flow.pt"
    torch.save({"weight": torch.zeros(2), "extra": Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"flow\.pt: holds code or objects that are not plain tensors") as refused:
        read_pt(path)
    assert "\n" not in str(refused.value) and "weights_only" not in str(refused.value) and not marker.exists()
