"""A recording killed at any moment is a valid WAV of everything flushed: readers that trust the
header's sizes (sox, players, scipy) see the audio, not an empty file, and the JSON's `frames`
counts exactly the frames the WAV holds."""
import json
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.io import wavfile

from app.conversation.recorder import FLUSH_EVERY_FRAMES, ConversationRecorder

REPO_ROOT = Path(__file__).resolve().parent.parent


def _chunks(data: bytes) -> dict[bytes, tuple[int, int]]:
    """A strict reading of the RIFF structure: chunk id -> (offset of its body, declared size)."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    assert struct.unpack("<I", data[4:8])[0] == len(data) - 8, "the RIFF size is the file's"
    chunks, at = {}, 12
    while at < len(data):
        kind, size = struct.unpack("<4sI", data[at:at + 8])
        chunks[kind] = (at + 8, size)
        at += 8 + size + (size & 1)
    assert at == len(data), "the chunks' sizes add up to the file"
    return chunks


def _recorded_and_killed(folder: Path, frames: int) -> Path:
    script = textwrap.dedent(f"""
        import os, numpy as np
        from app.conversation.recorder import ConversationRecorder
        r = ConversationRecorder({str(folder)!r}, "tiny", {{}})
        for i in range({frames}):
            user = np.full(1920, i / 100, np.float32)
            r.add_frame(user, -user, "w")
        os._exit(9)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=str(REPO_ROOT))
    assert done.returncode == 9
    return next(folder.glob("*.wav"))


@pytest.mark.parametrize("frames", [0, 5, FLUSH_EVERY_FRAMES, 2 * FLUSH_EVERY_FRAMES + 7, 5 * FLUSH_EVERY_FRAMES - 1])
def test_a_killed_recording_is_a_valid_wav_of_every_flushed_frame(tmp_path, frames):
    wav = _recorded_and_killed(tmp_path, frames)
    flushed = frames // FLUSH_EVERY_FRAMES * FLUSH_EVERY_FRAMES  # at most a second lost
    expected = np.repeat(np.arange(flushed, dtype=np.float32) / 100, 1920)
    chunks = _chunks(wav.read_bytes())
    assert chunks[b"data"][1] == flushed * 1920 * 2 * 4
    assert struct.unpack("<I", wav.read_bytes()[chunks[b"fact"][0]:][:4])[0] == flushed * 1920
    rate, audio = wavfile.read(wav)  # reads exactly the data size the header declares
    assert rate == 24000 and audio.dtype == np.float32 and audio.shape == (flushed * 1920, 2)
    np.testing.assert_array_equal(audio[:, 0], expected)
    np.testing.assert_array_equal(audio[:, 1], -expected)
    assert sf.info(wav).frames == flushed * 1920
    record = json.loads(wav.with_suffix(".json").read_text())
    assert record["frames"] == flushed
    assert "".join(w["word"] for w in record["words"]) == "w" * flushed


def test_a_closed_recording_has_exact_sizes_and_stops_its_fsync_thread(tmp_path):
    recorder = ConversationRecorder(tmp_path, "tiny", {})
    for _ in range(FLUSH_EVERY_FRAMES + 3):
        recorder.add_frame(np.full(1920, 0.5, np.float32), np.zeros(1920, np.float32), "")
    recorder.close()
    chunks = _chunks(recorder.wav_path.read_bytes())
    assert chunks[b"fmt "][1] == 40 and chunks[b"data"][1] == (FLUSH_EVERY_FRAMES + 3) * 1920 * 8
    assert wavfile.read(recorder.wav_path)[1].shape == ((FLUSH_EVERY_FRAMES + 3) * 1920, 2)
    assert json.loads(recorder.json_path.read_text())["frames"] == FLUSH_EVERY_FRAMES + 3
    assert not [t for t in threading.enumerate() if t.name == "recording fsync"]


def test_two_recorders_started_together_get_two_files(tmp_path):
    first, second = ConversationRecorder(tmp_path, "a", {}), ConversationRecorder(tmp_path, "b", {})
    assert first.wav_path != second.wav_path
    first.close()
    second.close()
