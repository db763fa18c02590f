"""`duplexcadence offline` reports PersonaPlex's prompts on a line of their own, before the SPEAK
summary (they run before the conversation, so its cadence never counts them); the demo model is
PersonaPlex-shaped, and without --voice or --role offline plays its first voice and the
default role."""
import re
import subprocess
import sys
from pathlib import Path

import soundfile as sf

from engine.families.moshi.lm.personaplex import DEFAULT_ROLE
from engine.files.paths import SPEECH_SAMPLE

REPO_ROOT = Path(__file__).resolve().parent.parent


def _offline(tmp_path, *extra) -> list[str]:
    """Its stderr's lines (in a process of its own: the command line sets up logging once)."""
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    clip = tmp_path / "clip.wav"
    sf.write(clip, speech[: 2 * rate], rate, subtype="FLOAT")
    done = subprocess.run([sys.executable, "-m", "app.cli", "offline", "--model", "demo", "--input", str(clip),
                           "--output", str(tmp_path / "out.wav"), "--device", "cpu", *extra],
                          capture_output=True, text=True, cwd=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def _prompt_line(lines: list[str]) -> str:
    prompts = [line for line in lines if line.startswith("prompts ")]
    assert len(prompts) == 1, lines
    speak = next(i for i, line in enumerate(lines) if line.startswith("SPEAK time"))
    assert lines.index(prompts[0]) < speak
    return prompts[0]


def test_the_default_voice_and_role_are_reported_with_their_time(tmp_path):
    line = _prompt_line(_offline(tmp_path))
    seconds = re.fullmatch(r'prompts (\d+\.\d\d) s \(voice DEMO, role "(.*)\.\.\."\)', line)
    assert seconds and float(seconds[1]) > 0, line
    assert DEFAULT_ROLE.startswith(seconds[2])


def test_a_role_given_is_reported_whole(tmp_path):
    line = _prompt_line(_offline(tmp_path, "--voice", "DEMO", "--role", "Be brief."))
    assert re.fullmatch(r'prompts \d+\.\d\d s \(voice DEMO, role "Be brief\."\)', line), line
