"""What overlapped launches (engine.kernels.overlap: programmatic dependent launch) save, in
one process on CUDA: the same model and speech run with them on and off, alternately, each run
a fresh prepared session (graphs recorded anew), the outputs compared bit for bit.

    python3 -m bench.overlap OUT.json [--shape moshiko|personaplex] [--weights bf16|int8]
                                      [--frames 300] [--rounds 2]

Full-size random weights as the main bench builds them. Reported per setting: the median over
rounds of each run's p50 frame wall time and per-stage p50 (CUDA events), and the ratios off/on.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from engine.families.moshi.frame import FRAME_KEYS
from engine.kernels import overlap

from .depformer_steps import identical, model, run
from .run import input_frames


def measure(shape: str, weights: str, frames: int, rounds: int) -> dict:
    from engine import load_model

    audio = input_frames(frames)
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    same, first, enabled = True, None, overlap.ENABLED
    with tempfile.TemporaryDirectory() as folder:
        lm, voice = model(shape, Path(folder))
        if weights == "int8":
            del lm
            lm = load_model(folder, device="cuda", dtype=torch.bfloat16, weights="int8")
        try:
            for i in range(rounds):
                for setting in ("on", "off"):
                    overlap.ENABLED = setting == "on"
                    figures, out = run(lm, voice, audio, FRAME_KEYS)
                    runs[setting].append(figures)
                    print(f"round {i + 1}, overlapped launches {setting}: {figures}", flush=True)
                    if first is None:
                        first = out
                    else:
                        same = same and identical(out, first)
        finally:
            overlap.ENABLED = enabled
    medians = {s: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for s, rs in runs.items()}
    return {"shape": shape, "weights": weights, "frames": frames, "rounds": rounds,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": runs, "median": medians,
            "bit_identical": same,
            "ratios_off_over_on": {k: round(medians["off"][k] / medians["on"][k], 3)
                                   for k in medians["on"] if k != "prompt_s" and medians["on"][k] > 0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--shape", choices=["moshiko", "personaplex"], default="moshiko")
    parser.add_argument("--weights", choices=["bf16", "int8"], default="bf16")
    parser.add_argument("--frames", type=int, default=300, help="conversation frames per run (default: 300)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting, alternating (default: 2)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.overlap: needs a CUDA GPU\n")
    result = measure(args.shape, args.weights, args.frames, args.rounds)
    result["command"] = (f"python3 -m bench.overlap OUT.json --shape {args.shape} --weights {args.weights} "
                         f"--frames {args.frames} --rounds {args.rounds}")
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("median", "ratios_off_over_on", "bit_identical")}, indent=1))


if __name__ == "__main__":
    main()
