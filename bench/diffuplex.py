"""`python3 -m bench --diffuplex`: what DiffuPlex saves over our own AR path, in one run.

Full-size PersonaPlex-shaped random weights and a full-size predictor (rank 16 on every target,
its LoRA B drawn too, so the adapter costs what a trained one costs). A random predictor is
never confident, so acceptance is forced: after each wake the loop plays exactly `a` of the
predicted frames (each still checked, as a real policy checks it), for a = 0..K, under LISTEN
and SPEAK. Reported per run, as means over every frame: the Core LM, the LM (with the
depformer) and the deployment path (PCM in to PCM out on the host), their ratios over AR, the
slowest wake frame, and the start-up figures (`prepare_s`, `prompt_s`, `first_frame_ms`); at the
paper's acceptance, a wake's cost c in AR steps and the wall-clock bound it leaves (`wake_bound`).
"""
from __future__ import annotations

import gc
import json
import platform
import tempfile
from pathlib import Path

import numpy as np
import torch

from engine.families.moshi.diffuplex.acceptance import PolicyChecks
from engine.period import FRAME_RATE

from .run import SHAPES, VOICE_S, WARMUP_FRAMES, input_frames, prompted_start, seconds, write_voice

RANK = 16
PUBLISHED = {"listen": {"core": 1.61, "wall": 1.46}, "speak": {"core": 1.80, "wall": 1.59}}
"""The paper's ratios over AR on a PersonaPlex backbone with trained adapters."""


class ForcedAcceptance(PolicyChecks):
    """Plays exactly `accept` predicted frames after each wake, whatever the checks say (a
    full-size predictor with random weights is never confident); the next one is refused as
    LISTEN refuses a speaking frame (before its depformer runs) or as SPEAK refuses a wrong
    user prediction (after). Each depformer-checked frame still reads the device once."""

    def __init__(self, cfg, device, accept: int):
        super().__init__(cfg, device)
        self.accept = accept

    def text_allows(self, i, text, confidence, options) -> bool:
        return i < self.accept or options.policy == "speak"

    def accepts(self, i, generated, confidence, user, options) -> bool:
        super().accepts(i, generated, confidence, user, options)  # the real policy's device read
        return i < self.accept


def _run(session, frames: np.ndarray, accept: int | None) -> dict:
    """One conversation after a prompted start of its own; `accept`: frames played after each
    wake (None: plain AR)."""
    prompt_s, first_frame_ms = prompted_start(session, frames[0])
    if accept is not None:
        session.conversation.diffuplex.checks = ForcedAcceptance(session.model.cfg, session.device, accept)
    records = []
    for frame in frames:
        out = session.step(frame)
        records.append((out.timings, out.report.woke if out.report is not None else True))
    records = records[WARMUP_FRAMES:]
    core = np.array([t["backbone"] for t, _ in records]) * 1000
    lm = core + np.array([t["depformer"] for t, _ in records]) * 1000
    total = np.array([t["total"] for t, _ in records]) * 1000
    woke = np.array([w for _, w in records])
    return {"accepted": accept, "frames": len(records), "wakes": int(woke.sum()),
            "prompt_s": prompt_s, "first_frame_ms": first_frame_ms,
            "core_ms": float(core.mean()), "lm_ms": float(lm.mean()),
            "total_mean_ms": float(total.mean()), "total_p50_ms": float(np.percentile(total, 50)),
            "wake_frame_p99_ms": float(np.percentile(total[woke], 99)), "wake_frame_max_ms": float(total[woke].max())}


def _progress(label: str, run: dict) -> dict:
    """Each run's figures as it ends (the whole table comes after the last)."""
    print(f"{label}: Core LM {run['core_ms']:.2f} ms, LM {run['lm_ms']:.2f} ms, total {run['total_mean_ms']:.2f} ms "
          f"a frame, {run['wakes']} wakes in {run['frames']} frames", flush=True)
    return run


def _implied(runs: list[dict], ar: dict, accepted: float) -> dict:
    """Ratios over AR at a mean accepted prefix `accepted`: wakes that play floor(accepted)
    and ceil(accepted) frames, mixed; per frame = (mean cost of a wake with what it plays) /
    (mean frames per wake)."""
    lo = int(accepted)
    by = {r["accepted"]: r for r in runs}
    p = accepted - lo
    out = {}
    for key in ("core_ms", "lm_ms", "total_mean_ms"):
        per_wake = (1 - p) * by[lo][key] * (1 + lo) + p * by[lo + 1][key] * (2 + lo)
        out[key.replace("_ms", "").replace("_mean", "")] = ar[key] / (per_wake / (1 + accepted))
    return out


def wake_bound(ar: dict, core_ratio: float, accepted: float) -> dict:
    """What bounds DiffuPlex's wall clock at `accepted` frames per wake: a wake's Core LM cost in AR
    steps (c = (1 + a) / the Core LM ratio), the AR frame's backbone time B and everything else R;
    the wall-clock ratio they allow, (B + R) / (c B / (1 + a) + R)."""
    c = (1 + accepted) / core_ratio
    backbone, rest = ar["core_ms"], ar["total_mean_ms"] - ar["core_ms"]
    return {"c": c, "backbone_ms": backbone, "rest_ms": rest,
            "wall_bound": (backbone + rest) / (c * backbone / (1 + accepted) + rest)}


def run_diffuplex_bench(shape: str, frames: int, block: int, seed: int, output: Path) -> dict:
    from engine import DuplexSession, Persona, RuntimeOptions, load_model
    from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor

    from .stock import write_stock_checkpoint

    if not torch.cuda.is_available():
        raise SystemExit("python3 -m bench needs a CUDA GPU")
    if shape != "personaplex":
        raise SystemExit("DiffuPlex needs a model that predicts the user's stream: --model personaplex")
    if frames < WARMUP_FRAMES + round(5 * FRAME_RATE):
        raise SystemExit(f"--frames must cover the {WARMUP_FRAMES} warm-up frames and 5 s more")
    pcm = input_frames(frames)
    report: dict = {"shape": shape, "frames": frames, "block": block, "rank": RANK,
                    "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "python": platform.python_version(), "runs": {}}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        model_dir = Path(tmp)
        write_stock_checkpoint(model_dir, SHAPES[shape], seed=seed)
        write_voice(model_dir, shape)
        model = load_model(model_dir, device="cuda", dtype=torch.bfloat16)
        predictor = new_predictor(model.cfg, rank=RANK, block=block, seed=seed)
        with torch.no_grad():
            for b in predictor.lora_b.values():
                b.normal_(0, 1e-3, generator=torch.Generator().manual_seed(seed))
        save_predictor(predictor, model_dir / "predictor.safetensors")
        del predictor
        # Measured from an empty context, as in the main bench; fast path on (the defaults).
        session = DuplexSession(model, RuntimeOptions(seed=seed, block=block), Persona(None, ""),
                                predictor=model_dir / "predictor.safetensors")
        report["prepare_s"] = seconds(session.prepare)
        report["prompts"] = {"voice_s": VOICE_S, "role": "the default role"}
        ar = report["runs"]["ar"] = _progress("ar", _run(session, pcm, None))
        for policy in ("listen", "speak"):
            runs = report["runs"][policy] = []
            for accept in range(block + 1):
                session.set_options(RuntimeOptions(seed=seed, policy=policy, block=block))
                runs.append(_progress(f"{policy} accepting {accept}", _run(session, pcm, accept)))
        report["graphs"] = len(session.runner.captured)
        report["peak_bytes"] = torch.cuda.max_memory_allocated() + session.store.mapped_bytes()
        session.close()
        del session, model
        gc.collect()
    report["ratios"] = {}
    for policy in ("listen", "speak"):
        accepted = PUBLISHED[policy]["core"] - 1  # the paper's Core LM ratio is about its frames per wake
        at = {"accepted": accepted, **_implied(report["runs"][policy], ar, accepted)}
        report["ratios"][policy] = {
            "by_accepted": [{"accepted": r["accepted"], "core": ar["core_ms"] / r["core_ms"],
                             "lm": ar["lm_ms"] / r["lm_ms"], "wall": ar["total_mean_ms"] / r["total_mean_ms"]}
                            for r in report["runs"][policy]],
            "at_published_acceptance": at, "bound": wake_bound(ar, at["core"], accepted),
            "published": PUBLISHED[policy]}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(format_table(report))
    return report


def format_table(report: dict) -> str:
    lines = [f"DiffuPlex, {report['shape']} on {report['gpu']}, K = {report['block']}, rank {report['rank']}, "
             f"{report['frames']} frames per run, torch {report['torch']}",
             "| policy | accepted per wake | wakes/s | Core LM ms/frame | LM ms/frame | frame mean ms | "
             "frame p50 ms | slowest wake frame ms | Core LM x | wall x | prompts s | first frame ms |",
             "|---" * 12 + "|"]
    ar = report["runs"]["ar"]

    def row(policy, r):
        wakes = r["wakes"] * FRAME_RATE / r["frames"]
        return (f"| {policy} | {'-' if r['accepted'] is None else r['accepted']} | {wakes:.2f} | {r['core_ms']:.2f} "
                f"| {r['lm_ms']:.2f} | {r['total_mean_ms']:.2f} | {r['total_p50_ms']:.2f} | "
                f"{r['wake_frame_max_ms']:.2f} | {ar['core_ms'] / r['core_ms']:.2f} | "
                f"{ar['total_mean_ms'] / r['total_mean_ms']:.2f} | {r['prompt_s']:.2f} | {r['first_frame_ms']:.2f} |")

    lines.append(row("ar", ar))
    for policy in ("listen", "speak"):
        lines += [row(policy, r) for r in report["runs"][policy]]
    lines.append(f"prepare() at load (the plain frame and the wakes of K = {report['block']}): "
                 f"{report['prepare_s']:.2f} s; each run's first frame follows its prompts")
    lines.append(f"ratios over AR, whose frame takes {ar['total_p50_ms']:.2f} ms p50, "
                 f"{ar['total_mean_ms']:.2f} ms mean")
    for policy, q in report["ratios"].items():
        at, pub = q["at_published_acceptance"], q["published"]
        lines.append(f"{policy} at {at['accepted']:.2f} accepted frames per wake: Core LM {at['core']:.2f}x "
                     f"(published {pub['core']:.2f}x), LM {at['lm']:.2f}x, wall-clock {at['total']:.2f}x "
                     f"(published {pub['wall']:.2f}x)")
        if "bound" in q:
            b = q["bound"]
            lines.append(f"  a wake costs c = {b['c']:.2f} AR steps of the Core LM; with B = {b['backbone_ms']:.2f} "
                         f"ms and R = {b['rest_ms']:.2f} ms the wall clock is bounded at {b['wall_bound']:.2f}x "
                         f"({at['total'] / b['wall_bound']:.0%} of it reached)")
    return "\n".join(lines)
