"""Frame time of two trees of this repository on one GPU, measured alternately (A B A B …), so
that a change that should cost nothing (a reorganisation) is held to the run-to-run spread.

    python3 -m bench.alternate --base COMMIT [--rounds 2] [--frames 1000] [--model moshiko] --output OUT.json

A is the base (`--base COMMIT`, checked out with `git worktree add`, or `--base-tree PATH`, a
tree made beforehand with `git archive`); B is this tree. Both read one checkpoint of full-size
random weights and the same input frames. Each run is a process of its own in its tree, running
that tree's `bench.run.run_ours`; the JSON holds every run and, per figure, the medians of A and
B, their ratio B/A and the spread between the A runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys
import numpy as np
from bench.run import run_ours
result = run_ours(sys.argv[1], np.load(sys.argv[2]), True, sys.argv[3])
json.dump(result.as_dict(), open(sys.argv[4], "w"))
"""
"""What each run executes in its tree: the tree's own bench.run.run_ours (both trees have it)."""


def figures(run: dict) -> dict[str, float]:
    """Frame p50, each stage's p50 (ms) and kernels per frame of one run."""
    out = {f"{stage} p50 ms": s["p50_ms"] for stage, s in run["stages"].items()}
    if run.get("kernels"):
        out["kernels per frame"] = run["kernels"]["frame"]["kernels"]
    return out


def summary(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    a, b = ([figures(r) for r in runs[k]] for k in ("A", "B"))
    out = {}
    for key in a[0]:
        ma, mb = statistics.median(r[key] for r in a), statistics.median(r[key] for r in b)
        spread = (max(r[key] for r in a) - min(r[key] for r in a)) / ma if ma else 0.0
        out[key] = {"A": ma, "B": mb, "B/A": mb / ma if ma else float("nan"), "A-to-A spread": spread}
    return out


def base_tree(args, folder: Path) -> Path:
    if args.base_tree:
        return args.base_tree.resolve()
    tree = folder / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.base], check=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.alternate", description=__doc__.splitlines()[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--base", help="the base commit (A), checked out with git worktree")
    given.add_argument("--base-tree", type=Path, help="the base's tree (A), already made")
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs (default %(default)s)")
    parser.add_argument("--frames", type=int, default=1000, help="frames per run (default %(default)s)")
    parser.add_argument("--model", choices=["moshiko", "personaplex"], default="moshiko")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    from bench.run import SHAPES, input_frames, write_voice
    from bench.stock import write_stock_checkpoint
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        folder = Path(tmp)
        trees = {"A": base_tree(args, folder), "B": ROOT}
        model_dir = folder / "model"
        model_dir.mkdir()
        write_stock_checkpoint(model_dir, SHAPES[args.model], seed=args.seed)
        if args.model == "personaplex":  # run_ours starts as PersonaPlex starts: its voice and role first
            write_voice(model_dir, args.model)
        frames = folder / "frames.npy"
        np.save(frames, input_frames(args.frames))
        runs: dict[str, list[dict]] = {"A": [], "B": []}
        for i in range(args.rounds):
            for side in ("A", "B"):
                result = folder / f"{side}{i}.json"
                # The tree's own packages first (the process also starts in it).
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(trees[side]), *filter(None, [os.environ.get("PYTHONPATH", "")])])}
                subprocess.run([sys.executable, "-c", CHILD, str(model_dir), str(frames), f"{side} round {i + 1}",
                                str(result)], cwd=trees[side], env=env, check=True)
                runs[side].append(json.loads(result.read_text()))
                print(f"{side} round {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures(runs[side][-1]).items()),
                      flush=True)
    report = {"command": " ".join(["python3 -m bench.alternate", *(argv or sys.argv[1:])]),
              "base": args.base or str(args.base_tree), "model": args.model, "frames": args.frames,
              "summary": summary(runs), "runs": runs}
    args.output.write_text(json.dumps(report, indent=1))
    for key, s in report["summary"].items():
        print(f"{key}: A {s['A']:.3f}, B {s['B']:.3f}, B/A {s['B/A']:.3f}, A-to-A spread {s['A-to-A spread']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
