import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import soundfile as sf

from app.conversation.recorder import FLUSH_EVERY_FRAMES, ConversationRecorder

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_stereo_user_left_model_right_and_transcript(tmp_path):
    recorder = ConversationRecorder(tmp_path, "tiny", {"policy": "ar"})
    user = np.linspace(-0.5, 0.5, 1920, dtype=np.float32)
    for i in range(5):
        recorder.add_frame(user, np.full(1920, 0.25 * i, dtype=np.float32), " hi" if i == 3 else "")
    recorder.note_options({"policy": "listen"})
    recorder.close()
    audio, rate = sf.read(recorder.wav_path, dtype="float32")
    assert rate == 24000 and audio.shape == (5 * 1920, 2)
    np.testing.assert_array_equal(audio[:1920, 0], user)
    np.testing.assert_array_equal(audio[1920 * 4:, 1], 1.0)
    record = json.loads(recorder.json_path.read_text())
    assert record["frames"] == 5 and record["channels"] == ["user", "model"]
    assert record["words"] == [{"word": "hi", "start": 0.24, "end": 0.32}]  # as `offline` writes them
    assert record["option_changes"] == [{"t": 0.4, "policy": "listen"}]
    assert record["audio"] == recorder.wav_path.name


def test_a_crash_keeps_everything_up_to_the_last_flush(tmp_path):
    """The process dies without closing anything: the files still hold what was flushed."""
    frames = 2 * FLUSH_EVERY_FRAMES + 5
    script = textwrap.dedent(f"""
        import os, numpy as np
        from app.conversation.recorder import ConversationRecorder
        r = ConversationRecorder({str(tmp_path)!r}, "tiny", {{}})
        for i in range({frames}):
            r.add_frame(np.full(1920, 0.1, np.float32), np.full(1920, -0.1, np.float32), "x")
        os._exit(3)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=str(REPO_ROOT))
    assert done.returncode == 3
    wav = next(tmp_path.glob("*.wav"))
    audio, _ = sf.read(wav, dtype="float32")
    assert audio.shape[1] == 2 and audio.shape[0] >= 2 * FLUSH_EVERY_FRAMES * 1920
    np.testing.assert_allclose(audio, np.broadcast_to([0.1, -0.1], audio.shape))
    record = json.loads(wav.with_suffix(".json").read_text())
    assert record["frames"] == 2 * FLUSH_EVERY_FRAMES
    assert record["words"] == [{"word": "x" * 2 * FLUSH_EVERY_FRAMES, "start": 0.0,
                                "end": round(2 * FLUSH_EVERY_FRAMES * 0.08, 3)}]


def test_the_recording_has_a_standard_float_wav_header(tmp_path):
    recorder = ConversationRecorder(tmp_path, "tiny", {})
    recorder.add_frame(np.zeros(1920, np.float32), np.zeros(1920, np.float32), "")
    recorder.close()
    header = recorder.wav_path.read_bytes()[:64]
    assert header[12:16] == b"fmt " and int.from_bytes(header[16:20], "little") == 40  # extensible
    assert int.from_bytes(header[20:22], "little") == 0xFFFE
    assert sf.info(recorder.wav_path).subtype == "FLOAT"
