"""`duplexcadence bench`: ours against the stock runtime, side by side in one process.

Both runtimes run the same full-size random weights (built by the stock runtime, written in
the official layout, read back by our loader) on the same input frames. Reported per runtime:
per-frame p50/p99 of the deployment path (PCM in on the host -> PCM out on the host) and of
each stage, SPEAK time per second, streaming-state memory at 10 / 30 / 120 s of
conversation, peak memory; then the ratios ours/stock and the weight-read floor.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SHAPES = {"moshiko": 8, "personaplex": 16}  # name: depformer steps
CHECKPOINTS_S = (10, 30, 120)
WARMUP_FRAMES = 12  # start-up frames and graph capture are excluded from the statistics


@dataclasses.dataclass
class RunResult:
    name: str
    stages: dict
    speak_time: dict
    state_bytes: dict
    peak_bytes: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def input_frames(frames: int) -> np.ndarray:
    """The bundled speech, looped to `frames` frames of 1920 samples."""
    from ..audio_io import read_audio, split_frames
    from ..paths import SPEECH_SAMPLE

    speech = read_audio(SPEECH_SAMPLE)
    reps = -(-frames * 1920 // len(speech))
    return split_frames(np.tile(speech, reps))[:frames]


def copy_bandwidth(device: str = "cuda", gib: int = 4) -> float:
    """Bytes per second moved by a device-to-device copy (read + write counted)."""
    src = torch.empty(gib << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    torch.cuda.synchronize()
    rate = 2 * src.numel() * 10 / (time.perf_counter() - t0)
    del src, dst
    torch.cuda.empty_cache()
    return rate


def _speak_summary(seconds: list[float]) -> dict:
    s = np.asarray(seconds)
    return {"mean_s": float(s.mean()), "p99_s": float(np.percentile(s, 99)), "max_s": float(s.max()),
            "over_cadence": int((s > 1.0).sum()), "seconds": len(s)}


def _stage_summary(records: list[dict]) -> dict:
    out = {}
    for key in records[0]:
        v = np.array([r[key] for r in records]) * 1000.0
        out[key] = {"p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)),
                    "mean_ms": float(v.mean())}
    return out


def _speak_seconds(records: list[dict]) -> list[float]:
    """The same SPEAK-time definition as the session and the app's panel."""
    from ..session import SpeakMeter

    meter = SpeakMeter(frame_size=1920, sample_rate=24000)
    for r in records:
        meter.add(r["total"])
    return meter.seconds


def _marks() -> dict[int, str]:
    """Frame count -> label of the conversation lengths at which state memory is read."""
    return {round(s * 12.5): f"{s}s" for s in CHECKPOINTS_S}


def run_stock(model_dir: Path, frames: np.ndarray, shape: str) -> tuple[RunResult, int]:
    from .stock import StockRunner, load_stock, stock_state_bytes

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    mimi, lm = load_stock(model_dir, SHAPES[shape])
    runner = StockRunner(mimi, lm)
    state, marks = {}, _marks()
    for i, frame in enumerate(frames):
        runner.step(frame)
        if i + 1 in marks:
            state[marks[i + 1]] = stock_state_bytes(mimi, lm, runner.gen)
    records = runner.timer.records[WARMUP_FRAMES:]
    result = RunResult("stock moshi 0.2.13", _stage_summary(records), _speak_summary(_speak_seconds(records)),
                       state, torch.cuda.max_memory_allocated())
    lm_bytes = sum(p.numel() * p.element_size() for p in lm.parameters())
    runner.close()
    del runner, mimi, lm
    gc.collect()
    torch.cuda.empty_cache()
    return result, lm_bytes


def run_ours(model_dir: Path, frames: np.ndarray, optimized: bool) -> RunResult:
    from .. import DuplexSession, Persona, RuntimeOptions, load_model

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = load_model(model_dir, device="cuda", dtype=torch.bfloat16)
    options = RuntimeOptions(graph_replay=optimized, demand_sized_state=optimized)
    # No persona prompts: the stock runtime runs none, so both start from an empty context.
    session = DuplexSession(model, options, Persona(None, ""))
    records, state, marks = [], {}, _marks()
    for i, frame in enumerate(frames):
        records.append(session.step(frame).timings)
        if i + 1 in marks:
            state[marks[i + 1]] = session.state_bytes()
    kept = records[WARMUP_FRAMES:]
    name = "ours, " + ("graph_replay + demand_sized_state" if optimized else "optimizations off")
    # Demand-sized rings are mapped outside torch's allocator; they only grow, so the peak
    # is torch's peak plus what is mapped at the end.
    peak = torch.cuda.max_memory_allocated() + session.store.mapped_bytes()
    result = RunResult(name, _stage_summary(kept), _speak_summary(_speak_seconds(kept)), state, peak)
    session.close()
    del session, model
    gc.collect()
    torch.cuda.empty_cache()
    return result


def run_bench(args) -> dict:
    from .stock import write_stock_checkpoint

    if not torch.cuda.is_available():
        raise SystemExit("duplexcadence bench needs a CUDA GPU")
    if args.frames < round(30 * 12.5):
        raise SystemExit("--frames must cover at least 30 s (375 frames): the report compares state at 30 s")
    frames = input_frames(args.frames)
    report: dict = {"shape": args.model, "frames": args.frames, "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "python": platform.python_version()}
    bandwidth = copy_bandwidth()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        model_dir = Path(tmp)
        write_stock_checkpoint(model_dir, SHAPES[args.model], seed=args.seed)
        stock, lm_bytes = run_stock(model_dir, frames, args.model)
        ours = run_ours(model_dir, frames, optimized=True)
        plain = run_ours(model_dir, frames[:args.plain_frames], optimized=False)
    report["runs"] = [r.as_dict() for r in (stock, ours, plain)]
    report["floor"] = {"lm_bytes": lm_bytes, "copy_bandwidth_bytes_per_s": bandwidth,
                       "ms_per_frame": 1000.0 * lm_bytes / bandwidth,
                       "speak_s_per_second": 12.5 * lm_bytes / bandwidth}
    report["ratios"] = ratios(stock, ours, plain)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(format_table(report))
    return report


def ratios(stock: RunResult, ours: RunResult, plain: RunResult) -> dict:
    def p50(r, key="total"):
        return r.stages[key]["p50_ms"]

    return {"speedup_p50_vs_stock": p50(stock) / p50(ours),
            "speedup_mean_vs_stock": stock.stages["total"]["mean_ms"] / ours.stages["total"]["mean_ms"],
            "state_30s_fraction_of_stock": ours.state_bytes["30s"] / stock.state_bytes["30s"],
            "peak_fraction_of_stock": ours.peak_bytes / stock.peak_bytes,
            "optimized_vs_plain_p50": p50(plain) / p50(ours)}


def format_table(report: dict) -> str:
    lines = [f"{report['shape']} on {report['gpu']}, {report['frames']} frames, torch {report['torch']}",
             "| runtime | frame p50 ms | frame p99 ms | encode | backbone | depformer | decode | "
             "SPEAK s/s mean | state 10s/30s/120s MiB | peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        st, mib = r["stages"], 1 << 20
        state = "/".join(f"{r['state_bytes'].get(f'{s}s', float('nan')) / mib:.0f}" for s in CHECKPOINTS_S)
        lines.append(f"| {r['name']} | {st['total']['p50_ms']:.2f} | {st['total']['p99_ms']:.2f} | "
                     + " | ".join(f"{st[k]['p50_ms']:.2f}" for k in ("encode", "backbone", "depformer", "decode"))
                     + f" | {r['speak_time']['mean_s']:.3f} | {state} | {r['peak_bytes'] / (1 << 30):.2f} |")
    f, q = report["floor"], report["ratios"]
    lines.append(f"weight-read floor: {f['ms_per_frame']:.2f} ms/frame ({f['lm_bytes'] / 1e9:.1f} GB of LM "
                 f"weights at {f['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s)")
    lines.append("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in q.items()))
    return "\n".join(lines)
