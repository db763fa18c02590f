"""The figures bench/echo_options.py reports for an echo canceller's output: echo return loss
enhancement (after convergence, and how soon it reaches 20 dB) and how much of the near
speech it keeps in double talk."""
from __future__ import annotations

import numpy as np

RATE = 48000
FRAME = RATE // 100  # 10 ms
NOISE_DBFS = -60.0
CONVERGED_FROM_S = 2.0
TARGET_ERLE_DB = 20.0
WINDOW_S = 0.5
ABOVE_NOISE_DB = 20.0  # windows counted for the time to 20 dB: the microphone this far above the noise
MAX_LAG_MS = 50
SECONDS = 20.0
DOUBLE_TALK_FROM_S = SECONDS / 2


def erle_db(mic: np.ndarray, out: np.ndarray) -> float:
    return float(10 * np.log10((np.sum(mic ** 2) + 1e-20) / (np.sum(out ** 2) + 1e-20)))


def converged_erle_db(mic: np.ndarray, out: np.ndarray) -> float:
    start = int(CONVERGED_FROM_S * RATE)
    return erle_db(mic[start:len(out)], out[start:])


def time_to_erle_s(mic: np.ndarray, out: np.ndarray, target_db: float = TARGET_ERLE_DB) -> dict:
    """Among the 0.5 s windows (10 ms hop) where the microphone is 20 dB above the noise floor: the
    end time of the first whose ERLE reaches `target_db` ("first", 0.5 s at the earliest), and the
    end time of the first from which every later one does ("held"); None where there is none."""
    n = len(out)
    mic_energy = np.add.reduceat(mic[:n] ** 2, np.arange(0, n, FRAME))
    out_energy = np.add.reduceat(out ** 2, np.arange(0, n, FRAME))
    width = int(WINDOW_S * 100)
    mic_windows = np.convolve(mic_energy, np.ones(width), "valid")
    out_windows = np.convolve(out_energy, np.ones(width), "valid")
    floor = 10 ** ((NOISE_DBFS + ABOVE_NOISE_DB) / 10) * width * FRAME
    erle = 10 * np.log10((mic_windows + 1e-20) / (out_windows + 1e-20))
    valid = mic_windows > floor
    hits = np.nonzero((erle >= target_db) & valid)[0]
    misses = np.nonzero((erle < target_db) & valid)[0]
    later = hits[hits > misses[-1]] if len(misses) else hits

    def end_s(index: int) -> float:
        return round(float((index + width) * FRAME / RATE), 2)
    return {"first": end_s(hits[0]) if len(hits) else None, "held": end_s(later[0]) if len(later) else None}


def near_preservation(out: np.ndarray, near: np.ndarray) -> dict:
    """Pearson correlation of the output with `near` (the clean near speech) over the double-talk
    part, at the best lag within +-MAX_LAG_MS (positive: the output lags), and the output's level
    against it (dB)."""
    start = int(DOUBLE_TALK_FROM_S * RATE)
    end = len(out)
    max_lag = MAX_LAG_MS * RATE // 1000

    def pearson(lag: int) -> float:
        lo, hi = max(start, start + lag), min(end, end + lag)
        return float(np.corrcoef(out[lo:hi], near[lo - lag:hi - lag])[0, 1])

    coarse = max(range(-max_lag, max_lag + 1, 8), key=pearson)  # every 8 samples, then each one around the best
    lag = max(range(max(-max_lag, coarse - 8), min(max_lag, coarse + 8) + 1), key=pearson)
    best = (pearson(lag), lag)
    reference = near[start:end]
    level = 10 * np.log10(np.sum(out[start:end] ** 2) / np.sum(reference ** 2))
    return {"pearson": round(best[0], 4), "lag_ms": round(best[1] * 1000 / RATE, 2),
            "level_db": round(float(level), 2)}


# ---------------------------------------------------------------- the comparison
