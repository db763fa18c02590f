"""What leaving out the depformer steps a frame knows already saves, in one process: the same
model, prompts and speech run twice, with every step (the depformer as it ran before:
`depformer_steps` made to return dep_q) and as it runs now, their output compared bit for bit.
Reported per run: the PersonaPlex prompts' seconds (a voice and the default role), the
conversation frame's p50 wall time and its depformer stage's p50, and the ratios.

    python3 -m bench.depformer_steps OUT.json [--shape demo|personaplex] [--frames 200]

`demo`: the bundled demo model (PersonaPlex-shaped) on the CPU, one thread. `personaplex`:
full-size random weights as the main bench builds them, bf16 on CUDA, the session prepared
(graphs captured) before each run.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from .run import VOICE_NAME, input_frames, write_voice

WARMUP = 12  # start-up frames and first runs: left out of the statistics
STEP_FUNCTIONS = ("engine.families.moshi.frame.depformer_steps", "engine.families.moshi.diffuplex.wake.depformer_steps")


@contextlib.contextmanager
def every_step():
    """The depformer as it ran before: every step, whatever the frame knows."""
    with contextlib.ExitStack() as stack:
        for name in STEP_FUNCTIONS:
            stack.enter_context(mock.patch(name, lambda known, dep_q: dep_q))
        yield


def model(shape: str, folder: Path):
    """(the model, its voice prompt's name or None): the demo, or full-size random weights of
    a bench shape (bench.run.SHAPES) in bf16 on CUDA, with a voice for the personaplex shape."""
    from engine import load_model

    if shape == "demo":
        return load_model("demo"), "DEMO"
    from bench.run import SHAPES
    from bench.stock import write_stock_checkpoint

    write_stock_checkpoint(folder, SHAPES[shape], seed=0)
    if shape == "personaplex":
        write_voice(folder, shape)
    return load_model(folder, device="cuda", dtype=torch.bfloat16), VOICE_NAME if shape == "personaplex" else None


def run(model, voice: str | None, frames: np.ndarray, stages=("depformer",)) -> tuple[dict, list]:
    """One conversation over `frames` (prepared first on CUDA): its prompts' seconds, the
    frame's p50 wall time and the p50 of each of `stages`, and its FrameOutputs."""
    from engine import DuplexSession, Persona, RuntimeOptions
    from engine.families.moshi.lm.personaplex import DEFAULT_ROLE

    session = DuplexSession(model, RuntimeOptions(seed=3), Persona(None, ""))
    if session.device.type == "cuda":
        session.prepare()
    session.reset(Persona(voice, DEFAULT_ROLE) if voice else Persona(None, ""))
    prompt_s = session.prompt_s
    out = [session.step(frame) for frame in frames]
    session.close()
    steady = out[WARMUP:]
    figures = {"prompt_s": round(prompt_s, 4),
               "frame_p50_ms": round(1000 * statistics.median(f.timings["total"] for f in steady), 3)}
    for stage in stages:
        figures[f"{stage}_p50_ms"] = round(1000 * statistics.median(f.timings[stage] for f in steady), 3)
    return figures, out


def identical(a: list, b: list) -> bool:
    """Tokens and PCM equal, frame by frame."""
    return all(np.array_equal(x.pcm, y.pcm) and (x.tokens is None) == (y.tokens is None)
               and (x.tokens is None or np.array_equal(x.tokens, y.tokens)) for x, y in zip(a, b, strict=True))


def measure(shape: str, frames: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        lm, voice = model(shape, Path(folder))
        audio = input_frames(frames)
        with every_step():
            every, every_out = run(lm, voice, audio)
        fewer, fewer_out = run(lm, voice, audio)
    return {"shape": shape, "frames": frames, "device": str(lm.device), "every_step": every,
            "known_steps_left_out": fewer, "bit_identical": identical(fewer_out, every_out),
            "ratios": {k: round(every[k] / fewer[k], 3) for k in every if fewer[k] > 0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--shape", choices=["demo", "personaplex"], default="demo", help="model (default: demo)")
    parser.add_argument("--frames", type=int, default=200, help="conversation frames per run (default: 200)")
    args = parser.parse_args()
    if args.shape == "demo":
        torch.set_num_threads(1)  # a steadier figure on a shared machine
    result = measure(args.shape, args.frames)
    result["command"] = f"python3 -m bench.depformer_steps OUT.json --shape {args.shape} --frames {args.frames}"
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
