"""The private PulseAudio server (bench/virtual_audio.py) as a fixture for the tests, and a
comparison of what was played with what was heard."""
from __future__ import annotations

import numpy as np
import pytest

from bench.virtual_audio import (  # noqa: F401  (names the tests import from here)
    MIC_SINK,
    SINK_RATE,
    SPEAKER_SINK,
    VirtualAudio,
    missing_tools,
)


@pytest.fixture(scope="module")
def virtual_audio(tmp_path_factory):
    """A running VirtualAudio for the module's tests. Missing tools fail loudly rather than
    skip: CI must exercise real streams (deselect with `-m "not audio"` if you must)."""
    missing = missing_tools()
    if missing:
        pytest.fail(f"virtual audio needs {', '.join(missing)} (Debian: pulseaudio "
                    "pulseaudio-utils libasound2-plugins libportaudio2)")
    audio = VirtualAudio(tmp_path_factory.mktemp("pulse"))
    audio.start()
    yield audio
    audio.stop()


def best_window_match(source: np.ndarray, target: np.ndarray, rate: int,
                      window_s: float = 0.1, count: int = 5, band_hz: float = 8000) -> float:
    """Whether `source`'s audio turns up in `target` (same rate): the best normalised
    correlation of any of `source`'s `count` loudest short windows against every window of
    `target`, both low-passed to `band_hz` (resampler filters differ near Nyquist). 1.0 =
    found unchanged; unrelated audio scores around 0.1. Short windows, because a slow engine's
    audio is cut by dropped backlog and speaker underflows."""
    source, target = _low_pass(source, rate, band_hz), _low_pass(target, rate, band_hz)
    width = int(window_s * rate)
    starts = range(0, len(source) - width, width // 2)
    loudest = sorted(starts, key=lambda s: -np.square(source[s:s + width]).sum())[:count]
    return max(_match(source[s:s + width], target) for s in loudest)


def _match(segment: np.ndarray, signal: np.ndarray) -> float:
    n = len(signal) + len(segment)
    xcorr = np.fft.irfft(np.fft.rfft(signal, n) * np.conj(np.fft.rfft(segment, n)), n)
    xcorr = xcorr[:len(signal) - len(segment) + 1]
    energy = np.cumsum(np.concatenate([[0.0], np.square(signal, dtype=np.float64)]))
    window_norm = np.sqrt(np.maximum(energy[len(segment):] - energy[:-len(segment)], 1e-12))
    return float(np.max(np.abs(xcorr) / (window_norm * np.linalg.norm(segment))))


def _low_pass(x: np.ndarray, rate: int, band_hz: float) -> np.ndarray:
    spectrum = np.fft.rfft(x)
    spectrum[np.fft.rfftfreq(len(x), 1 / rate) > band_hz] = 0
    return np.fft.irfft(spectrum, len(x))
