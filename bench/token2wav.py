"""`python3 -m bench --tail step-audio2`: our token2wav stream against the stock one
(`minicpmo-utils` 1.0.7), side by side in one process, on the same full-size random weights.

Both load one official directory (bench.stock_token2wav) and stream the same prepared 3 s prompt
and one-second chunks (25 tokens plus 3 of lookahead): the stock one through its own
`set_stream_cache` / `stream`, ours through `Token2wavStream` with its default options. Per
variant ({10, 5} Euler steps x {fp32, fp16}), in a warm process: per-chunk wall time (first,
steady p50/p99/mean, last), peak memory and state bytes, kernels and GPU busy time per chunk
(a profiled pass of its own), and the setup times. The ratios are reported against targets, not
asserted: steady p50 at least 3x stock, p99 within 1.3x p50, peak memory 40% lower.
"""
from __future__ import annotations

import gc
import json
import platform
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from engine.token2wav.chunk_plan import chunk_bounds
from engine.token2wav.prompt import Prompt

VARIANTS = ((10, False), (10, True), (5, False), (5, True))
"""(Euler steps, fp16) per variant."""
PROMPT_TOKENS = 75  # a 3-second voice prompt
CHUNK_TOKENS = 25  # one second of speech per chunk
LOOKAHEAD = 3
STEADY_CHUNKS = 30
SETTLE_CHUNKS = 3
"""Chunks after the first before both caches hold the prompt and their 100 retained frames
(one-second chunks add 50 mel frames: the third trims)."""
PROFILED_CHUNKS = 5
WARM_CHUNKS = 5
"""Chunks the throwaway stream runs to warm the process (the stock encoder's torch.compile
traces its shapes, every library makes its handles and plans)."""
LAST_TOKENS = 10
TARGETS = {"steady_speedup": 3.0, "p99_over_p50": 1.3, "peak_fraction": 0.6, "first_over_steady": 1.0}


def bench_prompt(vocab: int, seed: int, tokens: int = PROMPT_TOKENS) -> Prompt:
    g = torch.Generator().manual_seed(seed)
    return Prompt(torch.randint(0, vocab, (1, tokens), generator=g, dtype=torch.int32),
                  torch.randn(1, 192, generator=g), torch.randn(1, 2 * tokens, 80, generator=g))


def chunk_schedule(steady: int, profiled: int, last_tokens: int = LAST_TOKENS) -> list[tuple[int, int, bool]]:
    """(start, stop, last) of the measured stream's calls: the first chunk, the settling ones,
    `steady` timed and `profiled` profiled steady chunks, then a last chunk of `last_tokens`."""
    full = 1 + SETTLE_CHUNKS + steady + profiled
    count = full * CHUNK_TOKENS + last_tokens
    return list(chunk_bounds(count, LOOKAHEAD, CHUNK_TOKENS))


def summarize(seconds: list[float], steady: int) -> dict:
    """Milliseconds of the first call, the `steady` calls after the settling ones, and the last."""
    ms = np.asarray(seconds) * 1000
    timed = ms[1 + SETTLE_CHUNKS:1 + SETTLE_CHUNKS + steady]
    return {"first_ms": float(ms[0]), "steady_p50_ms": float(np.percentile(timed, 50)),
            "steady_p99_ms": float(np.percentile(timed, 99)), "steady_mean_ms": float(timed.mean()),
            "steady_chunks": len(timed), "last_ms": float(ms[-1])}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(call: Callable[[], object], device: torch.device) -> tuple[object, float]:
    """call()'s result and its wall time, the device synchronized before and after."""
    _sync(device)
    began = time.perf_counter()
    result = call()
    _sync(device)
    return result, time.perf_counter() - began


def _fresh_device(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


class _Driver:
    """One runtime: `load`, `new_stream`, `push` (tokens on the host in, audio on the host
    out), what its stream holds (`state_bytes`), and `close`."""
    name = ""

    def state_extra(self) -> dict:
        return {}


class _Ours(_Driver):
    def __init__(self, model_dir: Path, steps: int, fp16: bool, device: torch.device):
        from engine.token2wav import load_token2wav
        self.name, self.steps, self.device = "ours", steps, device
        self.model = load_token2wav(model_dir, device=device, fp16=fp16)
        self.stream, self.replays = None, 0

    def new_stream(self, prompt: Prompt) -> None:
        from engine.token2wav import Token2wavStream
        if self.stream is not None:
            self.stream.close()
        self.stream, self.replays = Token2wavStream(self.model, prompt, steps=self.steps), 0
        if self.stream.graphs is not None:  # each Graphs.run replays one graph: counted here
            run = self.stream.graphs.run

            def counted(*args):
                self.replays += 1
                return run(*args)

            self.stream.graphs.run = counted

    def push(self, tokens: torch.Tensor, last: bool) -> np.ndarray:
        return self.stream.push(tokens, last).cpu().numpy()

    def state_bytes(self) -> int:
        return self.stream.nbytes()

    def peak_bytes(self) -> int:
        # Demand-sized rings are mapped outside torch's allocator and only grow within a stream.
        return torch.cuda.max_memory_allocated(self.device) + self.stream.store.mapped_bytes()

    def state_extra(self) -> dict:
        return {"placement": type(self.stream.store).__name__, "graphs": len(self.stream.captured),
                "replays": self.replays}

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


class _Stock(_Driver):
    def __init__(self, model_dir: Path, steps: int, fp16: bool, device: torch.device):
        from .stock_token2wav import load_stock, stock_token2wav_runtime
        self.name, self.device = "stock", device
        flow, hift = load_stock(model_dir, device, fp16)
        self.runtime = stock_token2wav_runtime(flow, hift, steps, fp16)

    def new_stream(self, prompt: Prompt) -> None:
        from .stock_token2wav import start_stock_stream
        start_stock_stream(self.runtime, prompt)

    def push(self, tokens: torch.Tensor, last: bool) -> np.ndarray:
        return self.runtime.stream(tokens[0].tolist(), last_chunk=last, return_waveform=True)

    def state_bytes(self) -> int:
        from .stock_token2wav import stock_stream_bytes
        return stock_stream_bytes(self.runtime)

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def state_extra(self) -> dict:
        from .stock_token2wav import stock_scratch_bytes
        return {"decoder_buffer_bytes": stock_scratch_bytes(self.runtime)}

    def close(self) -> None:
        pass


def run_runtime(kind: type[_Driver], model_dir: Path, steps: int, fp16: bool, seed: int, steady: int,
                device: torch.device, profile: bool = True, warm_chunks: int = WARM_CHUNKS,
                prompt_tokens: int = PROMPT_TOKENS) -> dict:
    """One runtime over one variant: load, a throwaway stream (`warm_chunks` chunks and a last
    one), then the measured stream (`chunk_schedule`)."""
    from engine.token2wav.token2wav_config import read_flow_config

    vocab = read_flow_config(model_dir / "flow.yaml").vocab_size
    prompt = bench_prompt(vocab, seed, prompt_tokens)
    schedule = chunk_schedule(steady, PROFILED_CHUNKS if profile else 0)
    tokens = torch.randint(0, vocab, (1, schedule[-1][1]), generator=torch.Generator().manual_seed(seed + 1),
                           dtype=torch.int32)
    _fresh_device(device)
    driver, load_s = _timed(lambda: kind(model_dir, steps, fp16, device), device)
    try:
        _, cold_s = _timed(lambda: driver.new_stream(prompt), device)
        for start, stop, last in chunk_bounds(warm_chunks * CHUNK_TOKENS + LAST_TOKENS, LOOKAHEAD, CHUNK_TOKENS):
            driver.push(tokens[:, start:stop], last)
        _, stream_s = _timed(lambda: driver.new_stream(prompt), device)

        def push(start: int, stop: int, last: bool) -> float:
            return _timed(lambda: driver.push(tokens[:, start:stop], last), device)[1]

        timed = 1 + SETTLE_CHUNKS + steady
        seconds = [push(*call) for call in schedule[:timed]]
        state = driver.state_bytes()
        kernels = _profile(driver, tokens, schedule[timed:-1]) if profile else None
        seconds.append(push(*schedule[-1]))
        result = {"runtime": driver.name, **summarize(seconds, steady), "state_bytes": state,
                  "peak_bytes": driver.peak_bytes() if device.type == "cuda" else None,
                  "load_s": load_s, "first_stream_s": cold_s, "stream_s": stream_s,
                  "setup_s": load_s + cold_s, **driver.state_extra()}
        if kernels is not None:
            result.update(kernels_per_chunk=kernels["kernels"], busy_ms_per_chunk=kernels["busy_ms"])
        return result
    finally:
        driver.close()  # the model goes with this frame: the next run starts from a fresh device


def _profile(driver: _Driver, tokens: torch.Tensor, chunks: list[tuple[int, int, bool]]) -> dict:
    """Kernels and GPU busy ms per chunk over `chunks` (torch.profiler, bench.kernels;
    no stage markers: every kernel counts to the chunk)."""
    from engine.runtime.timing import FrameTimer

    from .kernels import profile_stages

    calls: Iterator = iter(chunks)

    def step() -> None:
        start, stop, last = next(calls)
        driver.push(tokens[:, start:stop], last)

    return profile_stages(step, FrameTimer("cuda"), frames=len(chunks))["frame"]


def run_variant(model_dir: Path, steps: int, fp16: bool, seed: int, steady: int, device: torch.device,
                profile: bool = True, warm_chunks: int = WARM_CHUNKS, prompt_tokens: int = PROMPT_TOKENS) -> dict:
    """Stock then ours on one variant, with their ratios."""
    runs = [run_runtime(kind, model_dir, steps, fp16, seed, steady, device, profile, warm_chunks, prompt_tokens)
            for kind in (_Stock, _Ours)]
    return {"steps": steps, "dtype": "fp16" if fp16 else "fp32", "stock": runs[0], "ours": runs[1],
            "ratios": ratios(runs[0], runs[1])}


def ratios(stock: dict, ours: dict) -> dict:
    out = {"steady_speedup": stock["steady_p50_ms"] / ours["steady_p50_ms"],
           "p99_over_p50": ours["steady_p99_ms"] / ours["steady_p50_ms"],
           "first_over_steady": ours["first_ms"] / ours["steady_p50_ms"],
           "state_fraction": ours["state_bytes"] / stock["state_bytes"]}
    if stock.get("peak_bytes") and ours.get("peak_bytes"):
        out["peak_fraction"] = ours["peak_bytes"] / stock["peak_bytes"]
    return out


def targets_met(q: dict) -> dict:
    """Each target: met or not (None: not measured). Speedup: at least; the others: at most."""
    def met(name, at_least=False):
        if name not in q:
            return None
        return q[name] >= TARGETS[name] if at_least else q[name] <= TARGETS[name]
    return {"steady_speedup": met("steady_speedup", at_least=True), "p99_over_p50": met("p99_over_p50"),
            "peak_fraction": met("peak_fraction"), "first_over_steady": met("first_over_steady")}


def format_table(report: dict) -> str:
    mib, gib = 1 << 20, 1 << 30
    lines = [f"Step-Audio2 token2wav on {report['gpu']}, torch {report['torch']}: {report['steady_chunks']} steady "
             f"one-second chunks per run, a {PROMPT_TOKENS}-token prompt",
             "| variant | runtime | first ms | steady p50 ms | steady p99 ms | last ms | peak GiB | state MiB | "
             "kernels/chunk | GPU busy ms/chunk | load s | first stream s | fresh stream s |",
             "|---" * 13 + "|"]

    def num(value, scale=1.0, fmt=".2f"):
        return "-" if value is None else format(value / scale, fmt)

    for v in report["variants"]:
        for r in (v["stock"], v["ours"]):
            lines.append(f"| {v['steps']} steps {v['dtype']} | {r['runtime']} | {r['first_ms']:.1f} | "
                         f"{r['steady_p50_ms']:.1f} | {r['steady_p99_ms']:.1f} | {r['last_ms']:.1f} | "
                         f"{num(r.get('peak_bytes'), gib)} | {r['state_bytes'] / mib:.0f} | "
                         f"{num(r.get('kernels_per_chunk'), fmt='.0f')} | {num(r.get('busy_ms_per_chunk'))} | "
                         f"{r['load_s']:.2f} | {r['first_stream_s']:.2f} | {r['stream_s']:.2f} |")
    t = TARGETS
    lines += ["", f"| variant | steady p50 stock/ours (target >= {t['steady_speedup']}) | "
                  f"p99/p50 ours (<= {t['p99_over_p50']}) | peak ours/stock (<= {t['peak_fraction']}) | "
                  f"state ours/stock | first/steady ours (<= {t['first_over_steady']}) |", "|---" * 6 + "|"]
    for v in report["variants"]:
        cells = " | ".join(_ratio_cell(v["ratios"], name) for name in
                           ("steady_speedup", "p99_over_p50", "peak_fraction", "state_fraction", "first_over_steady"))
        lines.append(f"| {v['steps']} steps {v['dtype']} | {cells} |")
    return "\n".join(lines)


def _ratio_cell(q: dict, name: str) -> str:
    if name not in q:
        return "-"
    met = targets_met(q).get(name)
    return f"{q[name]:.2f}" + ("" if met is None else " met" if met else " MISSED")


def run_token2wav_bench(output: Path, seed: int = 0, steady: int = STEADY_CHUNKS) -> dict:
    """Every variant on a CUDA GPU; writes the JSON report to `output`, prints the tables."""
    from .stock_token2wav import check_stock_limits, write_model_dir

    if not torch.cuda.is_available():
        raise SystemExit("python3 -m bench --tail step-audio2 needs a CUDA GPU (torch sees none)")
    device = torch.device("cuda")
    report: dict = {"tail": "step-audio2", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "python": platform.python_version(), "seed": seed, "steady_chunks": steady,
                    "prompt_tokens": PROMPT_TOKENS, "chunk_tokens": CHUNK_TOKENS, "variants": []}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        model_dir = Path(tmp)
        write_model_dir(model_dir, seed)
        from engine.token2wav.token2wav_config import read_flow_config
        flow_cfg = read_flow_config(model_dir / "flow.yaml")
        for steps, fp16 in VARIANTS:
            check_stock_limits(2 * PROMPT_TOKENS, CHUNK_TOKENS + LOOKAHEAD, steps, flow_cfg)
            variant = run_variant(model_dir, steps, fp16, seed, steady, device)
            variant["targets_met"] = targets_met(variant["ratios"])
            report["variants"].append(variant)
            print(f"{steps} steps {variant['dtype']}: steady p50 stock {variant['stock']['steady_p50_ms']:.1f} ms, "
                  f"ours {variant['ours']['steady_p50_ms']:.1f} ms", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(format_table(report))
    return report
