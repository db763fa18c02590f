"""Where a steady frame's host time goes, on the session's own path: host clock stamps at
the frame's entry, each stage's mark, the first and last graph replay, the end of the sync
(the first thing after it), and the return, with the stages' CUDA-event times beside them.

The frame's wall time is the host's from `begin()` to `end()`: the GPU's stages, and what
the GPU waits for at the frame's start (the host's path to its first replay, the microphone
frame's copy) and after its last kernel (the sync returning). bench.launch_latency gives a
graph replay's own start cost, for comparison.

    python3 -m bench.frame_host OUT.json [--shape moshiko|personaplex|demo] [--frames 300]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from engine.frame import STAGES
from engine.runtime.graphs import Graphs

from .depformer_steps import model
from .run import input_frames

WARMUP = 50


def _stamped(session, frames) -> list[tuple[dict[str, float], dict[str, float]]]:
    """Each frame's (host stamps in µs from the call to `step`, its timer's stage times and
    total in µs)."""
    stamps: dict[str, float] = {}
    mark, prepare_more, replay = session.timer.mark, session._prepare_more, Graphs.run

    def marked(stage):
        stamps[f"mark {stage or 'start'}"] = time.perf_counter()
        mark(stage)

    def synced(began):
        stamps["synced"] = time.perf_counter()
        return prepare_more(began)

    def replayed(graphs, key):
        now = time.perf_counter()
        stamps.setdefault("first replay", now)
        stamps["last replay"] = now
        return replay(graphs, key)

    session.timer.mark, session._prepare_more, Graphs.run = marked, synced, replayed
    out = []
    try:
        for frame in frames:
            stamps.clear()
            start = time.perf_counter()
            result = session.step(frame)
            stamps["returned"] = time.perf_counter()
            out.append(({k: (t - start) * 1e6 for k, t in stamps.items()},
                        {k: result.timings[k] * 1e6 for k in (*STAGES, "total")}))
    finally:
        Graphs.run = replay
        del session.timer.mark, session._prepare_more
    return out


def measure(shape: str, frames: int) -> dict:
    from engine import DuplexSession, RuntimeOptions

    with tempfile.TemporaryDirectory() as folder:
        lm, _ = model(shape, Path(folder))
        session = DuplexSession(lm, RuntimeOptions(seed=3))
        if session.device.type == "cuda":
            session.prepare()
        session.reset()
        rows = _stamped(session, input_frames(frames))[WARMUP:]
        session.close()
    return {"shape": shape, "frames": frames, "device": str(lm.device),
            "gpu": torch.cuda.get_device_name() if lm.device.type == "cuda" else None,
            "torch": torch.__version__, "host_stamps_median_us": _medians([r[0] for r in rows]),
            "timer_median_us": _medians([r[1] for r in rows])}


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's median over the rows that have it, in the order of the medians."""
    medians = {k: statistics.median(r[k] for r in rows if k in r) for k in {k for r in rows for k in r}}
    return {k: round(v, 1) for k, v in sorted(medians.items(), key=lambda kv: kv[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--shape", choices=["moshiko", "personaplex", "demo"], default="moshiko")
    parser.add_argument("--frames", type=int, default=300, help="conversation frames (default: 300)")
    args = parser.parse_args()
    result = measure(args.shape, args.frames)
    result["command"] = f"python3 -m bench.frame_host OUT.json --shape {args.shape} --frames {args.frames}"
    for part in ("host_stamps_median_us", "timer_median_us"):
        print(part, ", ".join(f"{k} {v}" for k, v in result[part].items()), flush=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
