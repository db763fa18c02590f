"""Reading and writing audio files at the models' rate (24 kHz mono float32)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from .errors import AudioInputError
from .frame import FRAME_SIZE, SAMPLE_RATE


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Any readable format, rate, channel count or sample format -> mono float32 at `sample_rate`.

    Channels are averaged; the rate is converted with soxr's high-quality resampler.
    """
    path = Path(path)
    if not path.exists():
        raise AudioInputError(f"{path}: file not found")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioInputError(f"{path}: not a readable audio file ({exc})") from None
    if data.shape[0] == 0:
        raise AudioInputError(f"{path}: the file holds no audio samples")
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if rate != sample_rate:
        mono = soxr.resample(mono, rate, sample_rate, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def write_audio(path: str | Path, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    sf.write(str(path), np.asarray(pcm, dtype=np.float32), sample_rate, subtype="PCM_16")


def split_frames(pcm: np.ndarray, frame_size: int = FRAME_SIZE) -> np.ndarray:
    """[N] -> [ceil(N / frame_size), frame_size], zero-padding the last frame."""
    n = -(-len(pcm) // frame_size)
    padded = np.zeros(n * frame_size, dtype=np.float32)
    padded[:len(pcm)] = pcm
    return padded.reshape(n, frame_size)
