"""`duplexcadence offline` on the demo model: time-synchronous output, transcript, errors."""
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch

from app.cli.commands import main
from app.cli.offline import Progress, _write_all
from app.conversation.transcript import words_with_times
from engine.files.paths import SPEECH_SAMPLE

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_16k_stereo_speech_gives_24k_mono_of_the_same_duration(tmp_path):
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    speech16 = soxr.resample(speech[: 3 * rate], rate, 16000)
    source = tmp_path / "speech16k_stereo.wav"
    sf.write(source, np.stack([speech16, 0.5 * speech16], axis=1), 16000, subtype="PCM_16")
    out, transcript = tmp_path / "reply.wav", tmp_path / "reply.json"
    assert main(["offline", "--model", "demo", "--input", str(source), "--output", str(out),
                 "--transcript", str(transcript), "--seed", "3", "--device", "cpu"]) == 0
    info = sf.info(out)
    assert info.samplerate == 24000 and info.channels == 1
    assert abs(info.frames - len(speech16) * 24000 / 16000) <= 1
    reply, _ = sf.read(out, dtype="float32")
    assert np.abs(reply).max() > 0  # the model spoke (after its start-up frames)
    words = json.loads(transcript.read_text())["words"]
    assert words, "the demo model babbles text too"
    assert all(0 <= w["start"] < w["end"] <= 3.0 + 0.08 for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)


def test_same_seed_same_reply(tmp_path):
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    clip = tmp_path / "clip.wav"
    sf.write(clip, speech[: 3 * rate], rate, subtype="FLOAT")

    def run(name):
        out = tmp_path / name
        assert main(["offline", "--model", "demo", "--input", str(clip), "--output", str(out),
                     "--seed", "7", "--device", "cpu"]) == 0
        return sf.read(out)[0]

    first = run("a.wav")
    assert np.abs(first[: 24000 * 2]).max() > 0  # the first two seconds hold speech
    np.testing.assert_array_equal(first, run("b.wav"))


def test_words_are_joined_from_pieces_with_frame_times():
    words = words_with_times(["", " he", "llo", "", " world", ""])
    assert words == [{"word": "hello", "start": 0.08, "end": 0.24},
                     {"word": "world", "start": 0.32, "end": 0.4}]


def test_non_audio_input_fails_cleanly(tmp_path):
    bogus = tmp_path / "notes.wav"
    bogus.write_text("just some text")
    result = subprocess.run([sys.executable, "-m", "app.cli", "offline", "--model", "demo", "--input",
                             str(bogus), "--output", str(tmp_path / "o.wav")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "notes.wav" in result.stderr


def _offline(tmp_path, output, *extra, model="demo"):
    """Runs `offline` in a subprocess; returns (exit code, stderr)."""
    done = subprocess.run([sys.executable, "-m", "app.cli", "offline", "--model", model, "--input",
                           str(SPEECH_SAMPLE), "--output", str(output), *extra],
                          capture_output=True, text=True, cwd=str(REPO_ROOT))
    return done.returncode, done.stderr


@pytest.mark.parametrize("output,expected", [
    (".", "is a folder"), ("reply.xyz", "unknown audio format .xyz"),
    ("missing/reply.wav", "folder to write it in does not exist")])
def test_bad_outputs_are_refused_before_any_work(tmp_path, output, expected):
    # A model that does not exist: the output's problem must be found first, before loading.
    code, err = _offline(tmp_path, tmp_path / output, model=str(tmp_path / "no-such-model"))
    assert code == 2 and expected in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_missing_transcript_folder_is_refused_before_the_audio_is_written(tmp_path):
    code, err = _offline(tmp_path, tmp_path / "reply.wav", "--transcript", str(tmp_path / "gone" / "t.json"),
                         model=str(tmp_path / "no-such-model"))
    assert code == 2 and "gone" in err and not (tmp_path / "reply.wav").exists()


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cuda:"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_a_bad_device_is_one_line(tmp_path, device):
    code, err = _offline(tmp_path, tmp_path / "reply.wav", "--device", device)
    assert code == 2 and f"device {device}" in err and len(err.strip().splitlines()) == 1


def test_no_extension_means_wav_and_a_failed_write_leaves_nothing(tmp_path):
    pcm = np.zeros(2400, dtype=np.float32)
    _write_all(str(tmp_path / "reply"), pcm, None, {})
    assert sf.info(tmp_path / "reply").format == "WAV"
    with pytest.raises(OSError):
        _write_all(str(tmp_path / "second.wav"), pcm, str(tmp_path / "gone" / "t.json"), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reply"]


def test_an_interrupted_run_ends_its_progress_line():
    stream = io.StringIO()
    with pytest.raises(KeyboardInterrupt), Progress(10, stream) as progress:
        progress.update(3)
        raise KeyboardInterrupt
    assert stream.getvalue().endswith("\n")
