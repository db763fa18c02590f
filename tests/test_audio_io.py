"""Audio files in any rate, channel count and format come out as 24 kHz mono float32."""
import numpy as np
import pytest
import soundfile as sf

from engine.errors import AudioInputError
from engine.files.audio import read_audio, split_frames
from engine.files.paths import SPEECH_SAMPLE


def test_stereo_16k_int16_becomes_24k_mono(tmp_path):
    t = np.arange(16000) / 16000
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), 0.1 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / "stereo16k.wav"
    sf.write(path, np.stack([left, right], axis=1), 16000, subtype="PCM_16")
    pcm = read_audio(path)
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert len(pcm) == 24000
    # Averaged channels: amplitude 0.3, and still a 440 Hz tone after resampling.
    assert abs(np.abs(pcm[2000:-2000]).max() - 0.3) < 0.01
    spectrum = np.abs(np.fft.rfft(pcm))
    assert abs(np.argmax(spectrum) * 24000 / len(pcm) - 440) < 2


def test_bundled_sample_is_speech_at_24k():
    pcm = read_audio(SPEECH_SAMPLE)
    assert 5 * 24000 < len(pcm) < 20 * 24000
    assert np.abs(pcm).max() > 0.1


@pytest.mark.parametrize("content", [b"", b"this is not audio at all" * 10])
def test_unreadable_files_name_the_file(tmp_path, content):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(AudioInputError, match="bad.wav"):
        read_audio(path)


def test_empty_wav_and_missing_file(tmp_path):
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0, 1)), 24000)
    with pytest.raises(AudioInputError, match="empty.wav.*no audio"):
        read_audio(empty)
    with pytest.raises(AudioInputError, match="missing.wav.*not found"):
        read_audio(tmp_path / "missing.wav")


def test_split_frames_pads_the_last_frame():
    frames = split_frames(np.ones(1920 * 2 + 5, dtype=np.float32))
    assert frames.shape == (3, 1920)
    assert frames[2, :5].sum() == 5 and frames[2, 5:].sum() == 0
