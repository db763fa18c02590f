"""`duplexcadence codec`: a real speech round trip through the demo Mimi, and clean errors."""
import subprocess
import sys

import numpy as np
import soundfile as sf

from app.cli.commands import main
from engine.files.paths import SPEECH_SAMPLE


def test_speech_round_trip_keeps_duration_and_makes_sound(tmp_path):
    # Stereo 44.1 kHz input: the command must resample and downmix, not fail.
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    stereo = tmp_path / "speech_44k_stereo.wav"
    import soxr
    resampled = soxr.resample(speech, rate, 44100)
    sf.write(stereo, np.stack([resampled, resampled], axis=1), 44100)
    out = tmp_path / "out.wav"
    assert main(["codec", "--model", "demo", "--input", str(stereo), "--output", str(out)]) == 0
    decoded, out_rate = sf.read(out, dtype="float32")
    assert out_rate == 24000 and decoded.ndim == 1
    assert abs(len(decoded) - len(speech)) <= 1
    assert np.abs(decoded).max() > 1e-4


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True)


def test_bad_checkpoint_prints_one_line_and_fails(tmp_path):
    bogus = tmp_path / "tokenizer-e351c8d8-checkpoint125.safetensors"
    bogus.write_bytes(b"not a checkpoint")
    result = _run_cli("codec", "--model", str(bogus), "--input", str(SPEECH_SAMPLE),
                      "--output", str(tmp_path / "o.wav"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert str(bogus) in result.stderr


def test_empty_wav_prints_one_line_and_fails(tmp_path):
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0, 1)), 24000)
    result = _run_cli("codec", "--model", "demo", "--input", str(empty), "--output", str(tmp_path / "o.wav"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "empty.wav" in result.stderr


def test_codec_session_matches_the_plain_stream_bit_for_bit():
    """The command's path (the stage runner, fast path on by default) against Mimi's plain
    stream: the same samples, with demand-sized state (the CPU's poisoned emulation) or not."""
    from engine.families.moshi.codec_session import CodecSession
    from engine.families.moshi.mimi import MimiStream, load_mimi
    from engine.files.audio import read_audio, split_frames
    from engine.files.paths import DEMO_MODEL_DIR
    from engine.options import RuntimeOptions

    mimi = load_mimi(DEMO_MODEL_DIR)
    frames = split_frames(read_audio(SPEECH_SAMPLE))[:30]
    stream = MimiStream(mimi)
    expected = np.stack([stream.decode_frame(stream.encode_frame(f)) for f in frames])
    for options in (RuntimeOptions(), RuntimeOptions(graph_replay=False, demand_sized_state=False)):
        codec = CodecSession(mimi, options)
        np.testing.assert_array_equal(np.stack([codec.roundtrip(f) for f in frames]), expected)
        codec.close()


def test_codec_takes_a_mimi_file_too(tmp_path):
    from engine.files.paths import DEMO_MODEL_DIR, MIMI_NAME

    renamed = tmp_path / "my_mimi.safetensors"
    renamed.write_bytes((DEMO_MODEL_DIR / MIMI_NAME).read_bytes())
    (tmp_path / "mimi_config.json").write_bytes((DEMO_MODEL_DIR / "mimi_config.json").read_bytes())
    short = tmp_path / "short.wav"
    speech, rate = sf.read(SPEECH_SAMPLE, dtype="float32")
    sf.write(short, speech[:rate], rate)
    out = tmp_path / "out.wav"
    assert main(["codec", "--model", str(renamed), "--input", str(short), "--output", str(out)]) == 0
    assert sf.info(out).frames == rate
