"""What a change of settings costs mid-conversation on a GPU: each change the app offers while a
conversation runs (graph replay and demand-sized state off and on; with a DiffuPlex predictor
the policy, K and τ; sampling), applied between two frames of a prepared session, and the wall
time of every frame around it (`session.step`, so a state move or a graph capture is counted).
A change that needs new graphs takes effect once they are recorded, between frames, while the
old ones replay; no frame may take longer than the cadence (80 ms) for it. Reported per change:
frames until it took effect, the slowest and mean frame until then and in the 24 after. Full-size random weights as
the main bench builds them: moshiko, and PersonaPlex with a full-size predictor (K = 4) whose
checks play 2 of each plan's frames (a random predictor is never confident).

    python3 -m bench.mid_change OUT_FOLDER
"""
from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from engine.period import FRAME_RATE

from .diffuplex import RANK, ForcedAcceptance
from .run import SHAPES, input_frames, seconds

CADENCE_MS = 1000 / FRAME_RATE
SETTLE = 24  # frames run under each setting after the one it took effect at
EFFECT_LIMIT = 150  # frames to wait for a change to take effect (12 s)
BLOCK = 4
SAMPLED = {"text_temperature": 0.9, "audio_top_k": 100}

CHANGES = {
    "moshiko": [("graph_replay", False), ("graph_replay", True), ("demand_sized_state", False),
                ("demand_sized_state", True), ("sampling", SAMPLED), ("greedy", True), ("greedy", False)],
    "personaplex": [("policy", "speak"), ("block", 2), ("block", 4), ("tau", 0.3), ("policy", "listen"),
                    ("sampling", SAMPLED), ("graph_replay", False), ("graph_replay", True), ("policy", "ar")],
}
"""Per shape, the changes in the order they are made: (option, value); "sampling" sets several."""


def _session(shape: str, folder: Path):
    from bench.stock import write_stock_checkpoint
    from engine import DuplexSession, Persona, RuntimeOptions, load_model

    write_stock_checkpoint(folder, SHAPES[shape], seed=0)
    model = load_model(folder, device="cuda", dtype=torch.bfloat16)
    predictor = None
    if shape == "personaplex":
        from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor
        predictor = folder / "predictor.safetensors"
        save_predictor(new_predictor(model.cfg, rank=RANK, block=BLOCK, seed=0), predictor)
    return DuplexSession(model, RuntimeOptions(block=BLOCK), Persona(None, ""), predictor=predictor)


def _step_ms(session, frame: np.ndarray) -> tuple[float, tuple[str, ...]]:
    """One frame's wall time (ms), and the options that took effect at it."""
    start = time.perf_counter()
    out = session.step(frame)
    return 1000 * (time.perf_counter() - start), out.applied


def measure(shape: str, folder: Path) -> dict:
    session = _session(shape, folder)
    prepare_s = seconds(session.prepare)
    if session.conversation.diffuplex is not None:  # each reset makes a new loop: after prepare's
        session.conversation.diffuplex.checks = ForcedAcceptance(session.model.cfg, session.device, 2)
    frames = input_frames((SETTLE + EFFECT_LIMIT) * (len(CHANGES[shape]) + 1))
    feed = iter(frames)
    before = [_step_ms(session, next(feed))[0] for _ in range(SETTLE)]
    rows, options = [], session.options
    for name, value in CHANGES[shape]:
        options = options.replace(**(value if name == "sampling" else {name: value}))
        session.set_options(options)
        waiting = []  # from the frame the change was set before to the one it took effect at
        while len(waiting) < EFFECT_LIMIT:
            ms, applied = _step_ms(session, next(feed))
            waiting.append(ms)
            if applied:
                break
        after = [_step_ms(session, next(feed))[0] for _ in range(SETTLE)]
        row = {"change": f"{name} = {value}", "took_effect_after_frames": len(waiting) - 1 if applied else None,
               "until_then_max_ms": round(max(waiting), 2), "until_then_mean_ms": round(float(np.mean(waiting)), 2),
               "after_max_ms": round(max(after), 2), "after_mean_ms": round(float(np.mean(after)), 2),
               "within_cadence": max(waiting + after) <= CADENCE_MS}
        rows.append(row)
        print(json.dumps(row), flush=True)
    session.close()
    del session
    gc.collect()
    torch.cuda.empty_cache()
    return {"shape": shape, "prepare_s": round(prepare_s, 2), "steady_mean_ms": round(float(np.mean(before[12:])), 2),
            "changes": rows}


def main(out: Path, shapes: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cadence_ms": CADENCE_MS,
              "shapes": []}
    for shape in shapes:
        with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
            report["shapes"].append(measure(shape, Path(tmp)))
        print(json.dumps({k: v for k, v in report["shapes"][-1].items() if k != "changes"}), flush=True)
    (out / "mid_change.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "out/mid_change"), sys.argv[2:] or list(CHANGES))
