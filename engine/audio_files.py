"""Reading and writing audio files at the models' rate (24 kHz mono float32)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from .errors import AudioInputError, AudioOutputError
from .frame import FRAME_SIZE, SAMPLE_RATE


def read_audio(path: str | Path, sample_rate: int = SAMPLE_RATE, channel: int | None = None) -> np.ndarray:
    """Any readable format, rate, channel count or sample format -> mono float32 at `sample_rate`.

    Channels are averaged (or only `channel` is taken); the rate is converted with soxr's
    high-quality resampler.
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
    if channel is not None:
        if channel >= data.shape[1]:
            raise AudioInputError(f"{path}: no channel {channel + 1} (the file has {data.shape[1]})")
        mono = data[:, channel]
    else:
        mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if rate != sample_rate:
        mono = soxr.resample(mono, rate, sample_rate, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def output_format(path: str | Path) -> tuple[str, str]:
    """(format, subtype) soundfile writes `path` in: from its extension, WAV without one;
    16-bit PCM where the format has it. An unknown extension raises AudioOutputError."""
    suffix = Path(path).suffix.lstrip(".").upper()
    if not suffix:
        return "WAV", "PCM_16"
    if suffix not in sf.available_formats():
        known = ", ".join(f".{f.lower()}" for f in ("WAV", "FLAC", "OGG"))
        raise AudioOutputError(f"{path}: unknown audio format .{suffix.lower()} (use {known}, or no extension for WAV)")
    return suffix, "PCM_16" if sf.check_format(suffix, "PCM_16") else sf.default_subtype(suffix)


def check_writable(path: str | Path) -> None:
    """Raise AudioOutputError naming `path` unless a file can be written there."""
    path = Path(path)
    if path.is_dir():
        raise AudioOutputError(f"{path}: is a folder; give a file name")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise AudioOutputError(f"{path}: the folder to write it in does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise AudioOutputError(f"{path}: cannot write there (permission denied)")


def write_audio(path: str | Path, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE,
                format_of: str | Path | None = None) -> None:
    """Mono float samples -> `path`, in the format the extension of `format_of` (default: of
    `path`) names; 16-bit PCM WAV without one (see output_format)."""
    fmt, subtype = output_format(format_of or path)
    sf.write(str(path), np.asarray(pcm, dtype=np.float32), sample_rate, subtype=subtype, format=fmt)


def split_frames(pcm: np.ndarray, frame_size: int = FRAME_SIZE) -> np.ndarray:
    """[N] -> [ceil(N / frame_size), frame_size], zero-padding the last frame."""
    n = -(-len(pcm) // frame_size)
    padded = np.zeros(n * frame_size, dtype=np.float32)
    padded[:len(pcm)] = pcm
    return padded.reshape(n, frame_size)
