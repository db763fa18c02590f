"""`duplexcadence offline` on the demo model: time-synchronous output, transcript, errors."""
import json
import subprocess
import sys

import numpy as np
import soundfile as sf
import soxr

from app.cli import main
from app.offline import words_with_times
from engine.paths import SPEECH_SAMPLE


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
    def run(name):
        out = tmp_path / name
        main(["offline", "--model", "demo", "--input", str(SPEECH_SAMPLE), "--output", str(out),
              "--seed", "7", "--device", "cpu"])
        return sf.read(out, frames=24000 * 2)[0]

    np.testing.assert_array_equal(run("a.wav"), run("b.wav"))


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
