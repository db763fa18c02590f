"""The first seconds of a conversation on a GPU, as a user meets them: `duplexcadence offline`
over 60 s of speech, each run a fresh process, on full-size moshiko-shaped random weights (built
by the stock runtime, as the main bench does), bf16 and int8, with a cold Triton cache (a new
folder) and then a warm one. Prints each run's summary and writes them to OUT/first_seconds.json.

    python3 -m bench.first_seconds OUT_FOLDER
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SECONDS = 60
SUMMARY = re.compile(r"over (\d+) s: mean ([\d.]+) s, p99 ([\d.]+) s, max ([\d.]+) s, first ([\d.]+) s, "
                     r"(\d+) second\(s\) over")


def speech_input(path: Path) -> None:
    """The bundled speech sample repeated to SECONDS (mono 24 kHz)."""
    from engine import SAMPLE_RATE, SPEECH_SAMPLE, read_audio, write_audio
    pcm = read_audio(SPEECH_SAMPLE)
    write_audio(path, np.tile(pcm, -(-SECONDS * SAMPLE_RATE // len(pcm)))[:SECONDS * SAMPLE_RATE])


def run_offline(checkpoint: Path, speech: Path, out: Path, weights: str, triton_cache: Path) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(triton_cache)}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "app.cli", "offline", "--model", str(checkpoint), "--weights",
                             weights, "--input", str(speech), "--output", str(out / f"reply_{weights}.wav")],
                            capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"offline failed ({weights}): {result.stderr[-2000:]}")
    lines = [line for line in result.stderr.splitlines() if "\r" not in line and line.strip()]
    match = SUMMARY.search(result.stderr)
    prepared = re.search(r"prepared in ([\d.]+) s", result.stderr)
    seconds, mean, p99, worst, first, over = match.groups()
    return {"weights": weights, "wall_s": round(wall, 2), "prepare_s": float(prepared.group(1)) if prepared else None,
            "seconds": int(seconds), "mean_s": float(mean), "p99_s": float(p99), "max_s": float(worst),
            "first_s": float(first), "over": int(over), "max_over_mean": round(float(worst) / float(mean), 2),
            "summary": lines[-3:]}


def main(out: Path) -> None:
    from bench.stock import write_stock_checkpoint
    out.mkdir(parents=True, exist_ok=True)
    checkpoint, speech = out / "moshiko_random", out / "speech60.wav"
    if not (checkpoint / "model.safetensors").is_file():
        checkpoint.mkdir(exist_ok=True)
        write_stock_checkpoint(checkpoint, dep_q=8, seed=0)
    speech_input(speech)
    runs = []
    for weights in ("bf16", "int8"):
        cache = out / f"triton_{weights}_{time.time_ns()}"  # a new folder: nothing compiled yet
        for state in ("cold", "warm"):
            run = {"triton_cache": state, **run_offline(checkpoint, speech, out, weights, cache)}
            runs.append(run)
            print(json.dumps(run), flush=True)
    (out / "first_seconds.json").write_text(json.dumps({"input_s": SECONDS, "runs": runs}, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "out/first_seconds"))
