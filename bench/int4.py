"""4-bit weights on an 8 GB card: ours int4 beside ours int8, with the whole process's GPU memory.

`python3 -m bench.int4 --shape moshiko --output OUT.json` writes full-size random weights of
the shape (as `python3 -m bench` does), exports them to the q8 layout and to ours int4, then
runs ours int8 and ours int4 over the whole context (3,000 frames), each in a fresh process:
memory here is the process's as the driver counts it (the CUDA context and kernels, torch's
reserved pool and the mapped state), not torch's allocations alone. It is read as the device's
used memory (`nvidia-smi --query-gpu=memory.used`, which works where a container hides other
processes' ids) less what was used before the process made its CUDA context, so the GPU must
be otherwise idle. The int4 runs are under an enforced budget: the card's target less the
context measured at start (engine.state.memory_budget caps torch's pool and the mapped state
together), over the whole context and, for moshiko, over 120 s at its smaller target.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GIB = 1 << 30
TARGETS = {"moshiko": {"whole context": 7.0, "120 s": 6.3}, "personaplex": {"whole context": 7.2}}
"""GiB of process memory an 8 GB card leaves to us with a desktop running."""


def device_used_bytes() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0]) << 20  # MiB


def _prepare(folder: Path, shape: str, seed: int) -> None:
    """Child: the bf16 checkpoint, then its q8 and int4 exports."""
    from engine.weights.export import export_int4, export_q8

    from .run import SHAPES, write_voice
    from .stock import write_stock_checkpoint

    (folder / "bf16").mkdir()
    write_stock_checkpoint(folder / "bf16", SHAPES[shape], seed=seed)
    if shape == "personaplex":
        write_voice(folder / "bf16", shape)
    export_q8(folder / "bf16", folder / "q8", "cuda")
    export_int4(folder / "bf16", folder / "int4", "cuda")


def _run(folder: Path, weights: str, seconds: float, target_gib: float | None) -> dict:
    """Child: ours over `seconds` of speech with `weights`, process memory at each mark."""
    import torch

    from engine.period import FRAME_RATE

    from .run import input_frames, run_ours

    before = device_used_bytes()
    torch.zeros(1, device="cuda")  # the context, alone
    context = device_used_bytes() - before
    memory: dict[str, float] = {}
    budget = None if target_gib is None else round(target_gib * GIB) - context
    result = run_ours(folder / ("q8" if weights == "int8" else weights), input_frames(round(seconds * FRAME_RATE)),
                      optimized=True, name=f"ours {weights}", budget_bytes=budget, weights=weights,
                      on_mark=lambda label: memory.__setitem__(label, (device_used_bytes() - before) / GIB))
    row = result.as_dict()
    row.update(context_gib=context / GIB, process_gib=memory, target_gib=target_gib)
    return row


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.int4", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.int4", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(TARGETS), default="moshiko", help="the checkpoint's shape")
    parser.add_argument("--output", type=Path, help="the JSON report (with --shape)")
    parser.add_argument("--seed", type=int, default=0, help="the random weights' seed (default: %(default)s)")
    parser.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)  # a child's job
    parser.add_argument("--run", nargs=4, metavar=("FOLDER", "WEIGHTS", "SECONDS", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare:
        _prepare(args.prepare, args.shape, args.seed)
        print("{}")
        return 0
    if args.run:
        folder, weights, seconds, target = args.run
        print(json.dumps(_run(Path(folder), weights, float(seconds), None if target == "-" else float(target))))
        return 0
    if args.output is None:
        parser.error("--output is needed")
    targets = TARGETS[args.shape]
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        _child(["--shape", args.shape, "--seed", str(args.seed), "--prepare", tmp])
        rows = [_child(["--run", tmp, "int8", "240", "-"])]
        print(_line(rows[-1]), flush=True)
        for label, gib in targets.items():
            rows.append(_child(["--run", tmp, "int4", "240" if label == "whole context" else "120", str(gib)]))
            rows[-1]["name"] += f", {label} under {gib} GiB"
            print(_line(rows[-1]), flush=True)
    p50 = [row["stages"].get("total", {}).get("p50_ms") for row in rows[:2]]
    report = {"command": f"python3 -m bench.int4 --shape {args.shape} --output OUT.json", "shape": args.shape,
              "memory": "device used memory less its value before the process's CUDA context", "runs": rows,
              "int4_speedup_p50_vs_ours_int8": p50[0] / p50[1] if all(p50) else None}
    args.output.write_text(json.dumps(report, indent=1))
    print(f"int4 p50 speed-up over ours int8: {report['int4_speedup_p50_vs_ours_int8']}")
    return 0


def _line(row: dict) -> str:
    total = row["stages"].get("total", {})
    memory = " / ".join(f"{k} {v:.2f}" for k, v in row["process_gib"].items())
    verdict = "" if row["target_gib"] is None else " passed" if row["failure"] is None else f" FAILED: {row['failure']}"
    nan = float("nan")
    return (f"{row['name']}: frame p50 {total.get('p50_ms', nan):.2f} ms, p99 {total.get('p99_ms', nan):.2f} ms; "
            f"process GiB (context {row['context_gib']:.2f}) {memory}{verdict}")


if __name__ == "__main__":
    sys.exit(main())
