"""`duplexcadence bench`: ours against the stock runtime, side by side in one process.

Both runtimes run the same full-size random weights (built by the stock runtime, written in
the official layout, read back by our loader) on the same input frames. Reported per runtime:
per-frame p50/p99 of the deployment path (PCM in on the host -> PCM out on the host) and of
each stage, SPEAK time per second, streaming-state memory at 10 / 30 / 120 s of
conversation, peak memory; then the ratios ours/stock and the weight-read floor.
"""
from __future__ import annotations

import functools
import gc
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..frame import FRAME_RATE, FRAME_SIZE
from .report import CHECKPOINTS_S, RunResult, format_table, ratios, summarize

SHAPES = {"moshiko": 8, "personaplex": 16}  # name: depformer steps
WARMUP_FRAMES = 12  # start-up frames and graph capture are excluded from the statistics


def input_frames(frames: int) -> np.ndarray:
    """The bundled speech, looped to `frames` frames."""
    from ..audio_io import read_audio, split_frames
    from ..paths import SPEECH_SAMPLE

    speech = read_audio(SPEECH_SAMPLE)
    reps = -(-frames * FRAME_SIZE // len(speech))
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


def _marks() -> dict[int, str]:
    """Frame count -> label of the conversation lengths at which state memory is read."""
    return {round(s * FRAME_RATE): f"{s}s" for s in CHECKPOINTS_S}


def run_stock(model_dir: Path, frames: np.ndarray, shape: str) -> tuple[RunResult, int]:
    from .kernels import profile_stages
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
    result = summarize("stock moshi 0.2.13", runner.records[WARMUP_FRAMES:], state,
                       torch.cuda.max_memory_allocated())
    result.kernels = profile_stages(functools.partial(runner.step, frames[-1]), runner.timer)
    lm_bytes = sum(p.numel() * p.element_size() for p in lm.parameters())
    runner.close()
    del runner, mimi, lm
    gc.collect()
    torch.cuda.empty_cache()
    return result, lm_bytes


def run_ours(model_dir: Path, frames: np.ndarray, optimized: bool) -> RunResult:
    from .. import DuplexSession, Persona, RuntimeOptions, load_model
    from .kernels import profile_stages

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
    name = "ours, " + ("graph_replay + demand_sized_state" if optimized else "optimizations off")
    # Demand-sized rings are mapped outside torch's allocator; they only grow, so the peak
    # is torch's peak plus what is mapped at the end.
    peak = torch.cuda.max_memory_allocated() + session.store.mapped_bytes()
    result = summarize(name, records[WARMUP_FRAMES:], state, peak)
    result.first_frame_s = records[0]["total"]
    result.kernels = profile_stages(functools.partial(session.step, frames[-1]), session.timer)
    session.close()
    del session, model
    gc.collect()
    torch.cuda.empty_cache()
    return result


def run_bench(shape: str, frames: int, plain_frames: int, seed: int, output: Path,
              fidelity_frames: int = 0) -> dict:
    """Stock, ours optimized (`frames` frames) and ours plain (`plain_frames`, slow) on the same
    full-size random weights of `shape`, then (`fidelity_frames` > 0) the teacher-forced
    fidelity of both in bf16 against the stock runtime in fp32; writes the JSON report to
    `output`, prints the tables."""
    from .stock import write_stock_checkpoint

    if not torch.cuda.is_available():
        raise SystemExit("duplexcadence bench needs a CUDA GPU")
    if frames < round(30 * FRAME_RATE):
        raise SystemExit("--frames must cover at least 30 s (375 frames): the report compares state at 30 s")
    if plain_frames < WARMUP_FRAMES + round(2 * FRAME_RATE):
        raise SystemExit(f"--plain-frames must cover the {WARMUP_FRAMES} warm-up frames and 2 s more "
                         f"({WARMUP_FRAMES + round(2 * FRAME_RATE)} frames)")
    pcm = input_frames(frames)
    report: dict = {"shape": shape, "frames": frames, "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "python": platform.python_version()}
    bandwidth = copy_bandwidth()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        model_dir = Path(tmp)
        write_stock_checkpoint(model_dir, SHAPES[shape], seed=seed)
        stock, lm_bytes = run_stock(model_dir, pcm, shape)
        ours = run_ours(model_dir, pcm, optimized=True)
        plain = run_ours(model_dir, pcm[:plain_frames], optimized=False)
        report["runs"] = [r.as_dict() for r in (stock, ours, plain)]
        report["ratios"] = ratios(stock, ours, plain)
        if fidelity_frames:
            from .fidelity import measure
            report["fidelity"] = measure(model_dir, fidelity_frames, seed)
    report["floor"] = {"lm_bytes": lm_bytes, "copy_bandwidth_bytes_per_s": bandwidth,
                       "ms_per_frame": 1000.0 * lm_bytes / bandwidth,
                       "speak_s_per_second": FRAME_RATE * lm_bytes / bandwidth}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(format_table(report))
    return report
