"""train-predictor on the demo model, briefly: the loss falls, checkpoints hold the steps done,
training resumes from them, and bad data is named."""
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
import torch

from app.cli.commands import main
from engine.errors import AudioInputError
from engine.families.moshi.diffuplex.predictor import load_predictor, new_predictor
from engine.files.paths import SPEECH_SAMPLE
from engine.loading.models import load_model
from engine.training.diffuplex import TrainSettings, loss, rollout, staircase, train_predictor, user_audio

REPO_ROOT = Path(__file__).resolve().parent.parent
SETTINGS = TrainSettings(steps=6, block=2, rank=2, batch=2, window=6, checkpoint_every=3, lr=1e-2)


@pytest.fixture(scope="module")
def model():
    return load_model("demo")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    folder = tmp_path_factory.mktemp("data")
    sf.write(folder / "user.wav", speech[: 2 * rate], rate)
    return folder


def test_training_learns_checkpoints_and_resumes(model, clip, tmp_path):
    out = tmp_path / "adapter.safetensors"
    losses = []
    train_predictor(model, clip, out, SETTINGS, progress=lambda step, steps, loss: losses.append(loss))
    assert len(losses) == 6
    # The same windows, before and after: the loss falls (batches of 2 are too noisy to compare).
    roll = rollout(model, user_audio(clip)[0][1], SETTINGS.seed)
    known, k = staircase(model, SETTINGS.block), SETTINGS.block
    windows = [(roll.inputs[t - SETTINGS.window + 1:t + k + 1], roll.generated[t + 1:t + k + 1])
               for t in range(SETTINGS.window - 1, roll.inputs.shape[0] - k, 3)]
    with torch.no_grad():
        before = [loss(model, new_predictor(model.cfg, rank=2, block=2), i, g, known) for i, g in windows]
        after = [loss(model, load_predictor(out, model.cfg), i, g, known) for i, g in windows]
    assert torch.stack(after).mean() < torch.stack(before).mean()
    spec = load_predictor(out, model.cfg).spec
    assert spec.training["steps_done"] == 6 and spec.block == 2 and spec.rank == 2
    assert spec.training["method"].startswith("self-distillation")
    more = []
    train_predictor(model, clip, out, TrainSettings(**{**SETTINGS.__dict__, "steps": 8}), resume=True,
          progress=lambda step, steps, loss: more.append(step))
    assert more == [7, 8] and load_predictor(out, model.cfg).spec.training["steps_done"] == 8


def test_bad_data_is_named(model, tmp_path):
    (tmp_path / "notes.wav").write_text("not audio")
    with pytest.raises(AudioInputError, match=r"notes\.wav: not a readable audio file"):
        train_predictor(model, tmp_path, tmp_path / "a.safetensors", SETTINGS)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AudioInputError, match="no audio files"):
        train_predictor(model, empty, tmp_path / "a.safetensors", SETTINGS)
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    short = tmp_path / "short"
    short.mkdir()
    sf.write(short / "tiny.wav", speech[: rate // 4], rate)
    with pytest.raises(AudioInputError, match="too little audio"):
        train_predictor(model, short, tmp_path / "a.safetensors", SETTINGS)


def test_the_command_checks_its_output_first(tmp_path):
    assert main(["train-predictor", "--model", "demo", "--out", str(tmp_path / "adapter.bin")]) == 2
    done = subprocess.run([sys.executable, "-m", "app.cli", "train-predictor", "--model", "demo", "--out",
                           str(tmp_path / "a.safetensors"), "--resume"], capture_output=True, text=True,
                          cwd=str(REPO_ROOT))
    assert done.returncode == 2 and "nothing to resume" in done.stderr and "Traceback" not in done.stderr


def test_the_shipped_demo_predictor_plays_clearly_more_than_an_untrained_one(model, tmp_path):
    """SPEAK over 60 frames of the bundled speech, greedy, tau 0.1, verification off (the
    untrained demo LM cannot predict real speech's codes, so every check against it fails):
    the shipped predictor (trained by `train-predictor --steps 240 --batch 4`) played 28 frames
    when this was written, an untrained one 3."""
    from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor
    from engine.files.audio import read_audio, split_frames
    from engine.options import RuntimeOptions
    from engine.session import DuplexSession

    assert model.predictor_file is not None  # found beside the checkpoint
    untrained = tmp_path / "untrained.safetensors"
    save_predictor(new_predictor(model.cfg, rank=8, block=4), untrained)
    frames = split_frames(read_audio(SPEECH_SAMPLE))[:60]
    played = {}
    for name, path in (("shipped", model.predictor_file), ("untrained", untrained)):
        options = RuntimeOptions(policy="speak", tau=0.1, verify="off", greedy=True)
        session = DuplexSession(model, options, predictor=path)
        played[name] = sum(not session.step(frame).report.woke for frame in frames)
    assert played["shipped"] >= 3 * played["untrained"] + 10, played
