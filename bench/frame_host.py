"""Where a steady frame's host time goes, on the session's own path: host clock stamps at the
frame's entry, each stage's mark, the steps up to the first graph replay, the last replay, the
end of the sync and the return, with the stages' CUDA-event times beside them.

The frame's wall time is the GPU's stages plus what the GPU waits for before its first kernel
(the host's path to its first replay) and after its last (the sync returning);
bench.launch_latency gives a graph replay's own start cost, for comparison.

    python3 -m bench.frame_host OUT.json [--shape moshiko|personaplex|demo] [--frames 300]
                                         [--wait stream|driver]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

import engine.runtime.step_audio as step_audio_module
import engine.session as session_module
from engine.runtime.graphs import Graphs

from .depformer_steps import model
from .run import input_frames

WARMUP = 50


def _stamped(session, frames) -> list[tuple[dict[str, float], dict[str, float]]]:
    """Each frame's (host stamps in µs from the call to `step`, its timer's stage times and
    total in µs)."""
    stamps: dict[str, float] = {}

    def stamping(call, before: str | None = None, after: str | None = None):
        """`call` with the first stamp of a frame under `before` at its entry and `after` at its return."""
        def stamped(*args, **kwargs):
            if before:
                stamps.setdefault(before, time.perf_counter())
            out = call(*args, **kwargs)
            if after:
                stamps.setdefault(after, time.perf_counter())
            return out
        return stamped

    def marked(stage):
        stamps[f"mark {stage or 'start'}"] = time.perf_counter()
        mark(stage)

    def replayed(graphs, key):
        now = time.perf_counter()
        stamps.setdefault("first replay", now)
        stamps["last replay"] = now
        return replay(graphs, key)

    mimi = getattr(getattr(session.conversation, "frame", None), "mimi", None)
    # (owner, attribute, its wrapper): patched on the instance (a module for a function),
    # restored by deleting the instance's attribute (by putting the function back).
    mark, replay, finite = session.timer.mark, Graphs.run, step_audio_module.finite_into
    patches = [(session.timer, "mark", marked),
               (session, "_prepare_more", stamping(session._prepare_more, before="synced")),
               (step_audio_module, "finite_into", stamping(finite, after="finite")),
               (session.conversation, "step", stamping(session.conversation.step, before="conversation")),
               (session.runner, "run", stamping(session.runner.run, before="first run")),
               (session.store, "advance", stamping(session.store.advance, after="first tick"))]
    if mimi is not None:
        patches.append((mimi, "encode", stamping(mimi.encode, before="encode call")))
    for owner, name, wrapper in patches:
        setattr(owner, name, wrapper)
    Graphs.run = replayed
    out = []
    try:
        for frame in frames:
            stamps.clear()
            start = time.perf_counter()
            result = session.step(frame)
            stamps["returned"] = time.perf_counter()
            out.append(({k: (t - start) * 1e6 for k, t in stamps.items()},
                        {k: t * 1e6 for k, t in result.timings.items()}))
    finally:
        Graphs.run = replay
        step_audio_module.finite_into = finite
        for owner, name, _ in patches:
            if owner is not step_audio_module:
                delattr(owner, name)
    return out


WAITS = ("stream", "driver")
"""How the frame waits for the device: the session's own (engine.runtime.waiting: the stream
polled), or the driver's synchronize it replaced, for comparison in one run."""


def _driver_wait(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def measure(shape: str, frames: int, wait: str = "stream") -> dict:
    from engine import DuplexSession, RuntimeOptions

    own = session_module.wait_for
    if wait == "driver":
        session_module.wait_for = _driver_wait
    try:
        with tempfile.TemporaryDirectory() as folder:
            lm, _ = model(shape, Path(folder))
            session = DuplexSession(lm, RuntimeOptions(seed=3))
            if session.device.type == "cuda":
                session.prepare()
            session.reset()
            rows = _stamped(session, input_frames(frames))[WARMUP:]
            session.close()
    finally:
        session_module.wait_for = own
    return {"shape": shape, "frames": frames, "wait": wait, "device": str(lm.device),
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
    parser.add_argument("--wait", choices=WAITS, default="stream",
                        help="the session's wait for the device, or the driver's synchronize (default: stream)")
    args = parser.parse_args()
    result = measure(args.shape, args.frames, args.wait)
    result["command"] = (f"python3 -m bench.frame_host OUT.json --shape {args.shape} --frames {args.frames}"
                         f" --wait {args.wait}")
    for part in ("host_stamps_median_us", "timer_median_us"):
        print(part, ", ".join(f"{k} {v}" for k, v in result[part].items()), flush=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
