"""`python3 -m bench`: ours against the stock runtime, side by side in one process.

Both runtimes run the same full-size random weights (built by the stock runtime, written in the
official layout, read back by our loader) on the same input frames. Reported per runtime: frame
p50/p99 of the deployment path (PCM in to PCM out on the host) and of each stage, SPEAK time per
second, state memory at 10 / 30 / 120 s, peak memory, the start-up (`prepare_s`,
`first_frame_ms`, and `prompt_s` for the personaplex shape); then the ratios and the weight-read
floor. The int8 rows run the official q8 layout through stock q8 (bitsandbytes) and ours. The
measured runs start from an empty context on both sides, as the stock runtime runs no prompts.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from engine.errors import DeviceMemoryError
from engine.period import FRAME_RATE, FRAME_SIZE

from .report import CHECKPOINTS_S, RunResult, format_table, int8_ratios, progress, ratios, summarize

SHAPES = {"moshiko": 8, "personaplex": 16}  # name: depformer steps
WARMUP_FRAMES = 12  # start-up frames and graph capture are excluded from the statistics
GIB = 1 << 30
VOICE_NAME, VOICE_S = "BENCH", 10
"""The personaplex shape's voice prompt: random embeddings (its time does not depend on them)."""
BUDGETS = {"moshiko": (10 * GIB, round(9.3 * GIB)), "personaplex": (round(10.5 * GIB), round(9.3 * GIB))}
"""Memory budgets of the int8 runs (torch's allocations plus mapped state): a whole
conversation on a 12 GB card, two minutes on a 10 GB card."""


def input_frames(frames: int) -> np.ndarray:
    """The bundled speech, looped to `frames` frames."""
    from engine.files.audio import read_audio, split_frames
    from engine.files.paths import SPEECH_SAMPLE

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


def write_voice(folder: Path, shape: str) -> None:
    """A voice prompt file for `shape`'s model in `folder` (where load_model finds voices)."""
    from engine.families.moshi.lm.lm_config import CONFIGS

    cfg = CONFIGS[shape]
    (folder / "voices").mkdir(exist_ok=True)
    torch.save({"embeddings": torch.randn(round(VOICE_S * FRAME_RATE), 1, 1, cfg.dim, dtype=torch.bfloat16),
                "cache": torch.zeros(1, cfg.n_q + 1, cfg.max_delay + 3, dtype=torch.int64)},
               folder / "voices" / f"{VOICE_NAME}.pt")


def seconds(work: Callable[[], object]) -> float:
    """Wall seconds of `work`, the device's included."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    work()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def prompted_start(session, frame: np.ndarray) -> tuple[float, float]:
    """A conversation started as PersonaPlex starts one (the bench's voice and the default role
    replayed, then `frame`): (the prompts' seconds, the first frame's ms). The session is then
    reset without prompts, for a measured run from an empty context."""
    from engine import Persona
    from engine.families.moshi.lm.personaplex import DEFAULT_ROLE

    session.reset(Persona(VOICE_NAME, DEFAULT_ROLE))
    prompt_s, first_ms = session.prompt_s, 1000 * session.step(frame).timings["total"]
    session.reset(Persona(None, ""))
    return prompt_s, first_ms


def _marks() -> dict[int, str]:
    """Frame count -> label of the conversation lengths at which memory is read."""
    return {round(s * FRAME_RATE): f"{s}s" for s in CHECKPOINTS_S}


def _fresh_device() -> None:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def run_stock(model_dir: Path, frames: np.ndarray, name: str) -> tuple[RunResult, int]:
    """The stock runtime over `frames`; a q8 checkpoint in `model_dir` runs as its q8 LM."""
    from .kernels import profile_stages
    from .stock import StockRunner, load_stock, stock_state_bytes

    _fresh_device()
    mimi, lm = load_stock(model_dir)
    runner = StockRunner(mimi, lm)
    prepare_s = runner.warm_up()
    state, peak, marks = {}, {}, _marks()
    for i, frame in enumerate(frames):
        runner.step(frame)
        if i + 1 in marks:
            state[marks[i + 1]] = stock_state_bytes(mimi, lm, runner.gen)
            peak[marks[i + 1]] = torch.cuda.max_memory_allocated()
    result = summarize(name, runner.records[WARMUP_FRAMES:], state, torch.cuda.max_memory_allocated())
    result.peak_at = peak
    result.prepare_s, result.first_frame_ms = prepare_s, 1000 * runner.records[0]["total"]
    result.kernels = profile_stages(functools.partial(runner.step, frames[-1]), runner.timer)
    lm_bytes = sum(p.numel() * p.element_size() for p in lm.parameters())
    runner.close()
    del runner, mimi, lm
    _fresh_device()
    progress(result)
    return result, lm_bytes


def run_ours(model_dir: Path, frames: np.ndarray, optimized: bool, name: str, budget_bytes: int | None = None,
             profile: bool = True, weights: str | None = None,
             on_mark: Callable[[str], None] | None = None) -> RunResult:
    """Ours over `frames` (the LM's weights as `model_dir` holds them). With `budget_bytes`,
    everything from loading on runs under that memory budget (torch's allocations and the
    mapped state together); running out of it is recorded in the result, not raised.
    `weights`: as load_model takes it; `on_mark(label)` is called at each memory mark and once
    more ("end") before the session closes."""
    from engine.state.memory_budget import memory_budget

    _fresh_device()
    result = RunResult(name, {}, {}, {}, 0)
    budget = memory_budget(budget_bytes) if budget_bytes else contextlib.nullcontext()
    try:
        with budget:
            result = _run_ours(model_dir, frames, optimized, name, profile, weights, on_mark)
    except (DeviceMemoryError, torch.OutOfMemoryError) as exc:
        result.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if budget_bytes:
        result.budget = {"limit_bytes": budget_bytes, "frames": len(frames), "passed": result.failure is None}
    _fresh_device()
    progress(result)
    return result


def _run_ours(model_dir: Path, frames: np.ndarray, optimized: bool, name: str, profile: bool,
              weights: str | None = None, on_mark: Callable[[str], None] | None = None) -> RunResult:
    from engine import DuplexSession, Persona, RuntimeOptions, load_model

    from .kernels import profile_stages

    model = load_model(model_dir, device="cuda", dtype=torch.bfloat16, weights=weights)
    options = RuntimeOptions(graph_replay=optimized, demand_sized_state=optimized)
    # No persona prompts: the stock runtime runs none, so both start from an empty context.
    session = DuplexSession(model, options, Persona(None, ""))
    try:
        prepare_s = seconds(session.prepare)
        prompted = prompted_start(session, frames[0]) if model.variant == "personaplex" else None
        records, state, peak, marks = [], {}, {}, _marks()
        for i, frame in enumerate(frames):
            records.append(session.step(frame).timings)
            if i + 1 in marks:
                state[marks[i + 1]] = session.state_bytes()
                # Demand-sized rings are mapped outside torch's allocator and only grow, so the
                # peak so far is torch's peak plus what is mapped now.
                peak[marks[i + 1]] = torch.cuda.max_memory_allocated() + session.store.mapped_bytes()
                if on_mark:
                    on_mark(marks[i + 1])
        if on_mark:
            on_mark("end")
        result = summarize(name, records[WARMUP_FRAMES:], state,
                           torch.cuda.max_memory_allocated() + session.store.mapped_bytes())
        result.peak_at = peak
        result.prepare_s = prepare_s
        result.prompt_s, result.first_frame_ms = prompted or (None, 1000 * records[0]["total"])
        if profile:
            result.kernels = profile_stages(functools.partial(session.step, frames[-1]), session.timer)
    finally:
        session.close()
    return result


def run_int8(q8_dir: Path, pcm: np.ndarray, shape: str) -> list[RunResult]:
    """The int8 rows: stock q8 and ours from the same official q8 file, over the whole context,
    ours under the budget of the card it is meant for; then ours for two minutes under the
    smaller card's budget."""
    stock_q8, _ = run_stock(q8_dir, pcm, "stock q8 (bitsandbytes)")
    full, two_minutes = BUDGETS[shape]
    ours = run_ours(q8_dir, pcm, optimized=True, name="ours int8", budget_bytes=full)
    small = run_ours(q8_dir, pcm[:round(120 * FRAME_RATE)], optimized=True, name="ours int8, 120 s",
                     budget_bytes=two_minutes, profile=False)
    return [stock_q8, ours, small]


def run_bench(shape: str, frames: int, plain_frames: int, seed: int, output: Path,
              fidelity_frames: int = 0, int8_frames: int = 0) -> dict:
    """Stock, ours optimized (`frames` frames) and ours plain (`plain_frames`, slow) on the same
    full-size random weights of `shape`; then (`int8_frames` > 0) the same weights in the
    official q8 layout, stock q8 and ours int8 over `int8_frames` (ours under a memory
    budget); then (`fidelity_frames` > 0) the teacher-forced fidelity of both runtimes in
    bf16 against the stock runtime in fp32, and in int8 against their bf16. Writes the JSON
    report to `output`, prints the tables."""
    from engine.weights.export import export_q8

    from .stock import write_stock_checkpoint

    if not torch.cuda.is_available():
        raise SystemExit("python3 -m bench needs a CUDA GPU")
    if frames < round(30 * FRAME_RATE):
        raise SystemExit("--frames must cover at least 30 s (375 frames): the report compares state at 30 s")
    if plain_frames < WARMUP_FRAMES + round(2 * FRAME_RATE):
        raise SystemExit(f"--plain-frames must cover the {WARMUP_FRAMES} warm-up frames and 2 s more "
                         f"({WARMUP_FRAMES + round(2 * FRAME_RATE)} frames)")
    if int8_frames and int8_frames < round(120 * FRAME_RATE):
        raise SystemExit("--int8-frames must cover at least 120 s (1500 frames): the smaller budget is checked "
                         "over two minutes")
    pcm = input_frames(max(frames, int8_frames))
    report: dict = {"shape": shape, "frames": frames, "int8_frames": int8_frames,
                    "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "python": platform.python_version()}
    bandwidth = copy_bandwidth()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        model_dir, q8_dir = Path(tmp) / "bf16", Path(tmp) / "q8"
        model_dir.mkdir()
        write_stock_checkpoint(model_dir, SHAPES[shape], seed=seed)
        if shape == "personaplex":
            write_voice(model_dir, shape)
            report["prompts"] = {"voice_s": VOICE_S, "role": "the default role"}
        stock, lm_bytes = run_stock(model_dir, pcm[:frames], "stock moshi 0.2.13")
        ours = run_ours(model_dir, pcm[:frames], True, "ours, graph_replay + demand_sized_state")
        plain = run_ours(model_dir, pcm[:plain_frames], False, "ours, optimizations off")
        runs = [stock, ours, plain]
        report["ratios"] = ratios(stock, ours, plain)
        if int8_frames:
            export_q8(model_dir, q8_dir, "cuda")
            int8 = run_int8(q8_dir, pcm[:int8_frames], shape)
            runs += int8
            report["int8_ratios"] = int8_ratios(stock, ours, *int8)
        report["runs"] = [r.as_dict() for r in runs]
        if fidelity_frames:
            from .fidelity import measure
            report["fidelity"] = measure(model_dir, fidelity_frames, seed, q8_dir if int8_frames else None)
    report["floor"] = {"lm_bytes": lm_bytes, "copy_bandwidth_bytes_per_s": bandwidth,
                       "ms_per_frame": 1000.0 * lm_bytes / bandwidth,
                       "speak_s_per_second": FRAME_RATE * lm_bytes / bandwidth}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(format_table(report))
    return report
