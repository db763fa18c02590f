"""The `duplexcadence` command as the user runs it: the console script installed beside this
Python (the virtual environment's bin/), in a subprocess, and a short speech clip to feed it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import soundfile as sf

from engine.files.paths import SPEECH_SAMPLE

COMMAND = Path(sys.executable).parent / ("duplexcadence.exe" if sys.platform == "win32" else "duplexcadence")


def duplexcadence(*args, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Runs the installed command; text output captured unless `kwargs` say otherwise."""
    kwargs.setdefault("capture_output", True)
    return subprocess.run([str(COMMAND), *map(str, args)], text=True, timeout=timeout, **kwargs)


def speech_clip(path: Path, seconds: float = 1.0) -> Path:
    """`seconds` of the bundled speech, as a 16-bit WAV at its own rate."""
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    sf.write(path, speech[: int(seconds * rate)], rate, subtype="PCM_16")
    return path


def one_line(stderr: str) -> str:
    """The refusal, checked to be one line without a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]
