"""The benchmark's numbers: summaries of per-frame records, ratios ours/stock, and the table
printed at the end of a run."""
from __future__ import annotations

import dataclasses

import numpy as np

from engine.runtime.timing import SpeakMeter

CHECKPOINTS_S = (10, 30, 120, 240)
"""Conversation lengths (seconds) at which streaming-state memory and the peak so far are
read; 240 s (3,000 frames) fills the whole attention context."""


@dataclasses.dataclass
class RunResult:
    name: str
    stages: dict
    speak_time: dict
    state_bytes: dict
    peak_bytes: int
    kernels: dict = dataclasses.field(default_factory=dict)
    """Per stage (and "frame"): kernels and GPU busy ms per frame (bench.kernels)."""
    prepare_s: float | None = None
    """Getting ready at load: ours `DuplexSession.prepare()` (kernels compiled, graphs captured),
    stock its server's warm-up; None where a runtime has none."""
    prompt_s: float | None = None
    """The family's prompts replayed (ours, for a model with prompts); else None."""
    first_frame_ms: float | None = None
    """The first conversation frame once ready (after prepare_s, and prompt_s where there are prompts)."""
    peak_at: dict = dataclasses.field(default_factory=dict)
    """Conversation length -> peak memory so far (ours: torch's peak plus the mapped state)."""
    budget: dict | None = None
    """For a run under a memory budget: its limit, frames and whether it passed."""
    failure: str | None = None
    """Why the run stopped (running out of its memory budget)."""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarize(name: str, records: list[dict], state: dict, peak_bytes: int) -> RunResult:
    """Per-stage p50/p99/mean and SPEAK time (the session's definition) of per-frame records."""
    meter = SpeakMeter()
    for r in records:
        meter.add(r["total"])
    return RunResult(name, _stage_summary(records), _speak_summary(meter.seconds), state, peak_bytes)


def progress(result: RunResult) -> None:
    """One run's figures, printed as it finishes (a cut-off bench still says what ran)."""
    if result.failure:
        print(f"done: {result.name}: failed: {result.failure}", flush=True)
        return
    st = result.stages
    line = (f"done: {result.name}: frame p50 {st['total']['p50_ms']:.2f} ms, p99 {st['total']['p99_ms']:.2f}; "
            + ", ".join(f"{k} {st[k]['p50_ms']:.2f}" for k in stage_names(st)))
    if result.kernels:
        line += f"; {result.kernels['frame']['kernels']:.0f} kernels, {result.kernels['frame']['busy_ms']:.2f} ms busy"
    print(line, flush=True)
    for stage, k in result.kernels.items():
        if k.get("heaviest"):
            print(f"  {stage}: " + "; ".join(f"{n} {c:.0f} / {t:.3f}" for n, c, t in k["heaviest"]), flush=True)


def _speak_summary(seconds: list[float]) -> dict:
    s = np.asarray(seconds)
    return {"mean_s": float(s.mean()), "p99_s": float(np.percentile(s, 99)), "max_s": float(s.max()),
            "over_cadence": int((s > 1.0).sum()), "seconds": len(s)}


def _stage_summary(records: list[dict]) -> dict:
    """Per stage: p50, p99, mean, and the p50 of each tenth of the run in order (what grows with
    the context, the attention over it, shows there rather than as a tail)."""
    out = {}
    for key in records[0]:
        v = np.array([r[key] for r in records]) * 1000.0
        out[key] = {"p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)),
                    "mean_ms": float(v.mean()),
                    "p50_by_tenth_ms": [round(float(np.median(part)), 4) for part in np.array_split(v, 10)]}
    return out


def ratios(stock: RunResult, ours: RunResult, plain: RunResult) -> dict:
    def p50(r, key="total"):
        return r.stages[key]["p50_ms"]

    return {"speedup_p50_vs_stock": p50(stock) / p50(ours),
            "speedup_mean_vs_stock": stock.stages["total"]["mean_ms"] / ours.stages["total"]["mean_ms"],
            "state_30s_fraction_of_stock": ours.state_bytes["30s"] / stock.state_bytes["30s"],
            "peak_fraction_of_stock": ours.peak_bytes / stock.peak_bytes,
            "optimized_vs_plain_p50": p50(plain) / p50(ours)}


def int8_ratios(stock: RunResult, ours: RunResult, stock_q8: RunResult, ours_int8: RunResult,
                small: RunResult) -> dict:
    """Ours int8 against stock bf16, our bf16 and stock q8; peaks over the whole context."""
    out = {"int8_budget_full_context_passed": ours_int8.failure is None,
           "int8_budget_120s_passed": small.failure is None}
    if ours_int8.failure is None:
        p50 = ours_int8.stages["total"]["p50_ms"]
        out.update(int8_speedup_p50_vs_stock_bf16=stock.stages["total"]["p50_ms"] / p50,
                   int8_speedup_p50_vs_ours_bf16=ours.stages["total"]["p50_ms"] / p50,
                   int8_speedup_p50_vs_stock_q8=stock_q8.stages["total"]["p50_ms"] / p50)
        last = max(ours_int8.peak_at, key=lambda k: int(k[:-1]), default=None)
        if last is not None and last in stock_q8.peak_at:
            out[f"int8_peak_{last}_fraction_of_stock_q8"] = ours_int8.peak_at[last] / stock_q8.peak_at[last]
    return out


def stage_names(summary: dict) -> list[str]:
    """The stages of a run's summary (or of a frame's timings), in the order they ran: every key
    but the frame's "total" (the family's stages, as the session's timer gives them)."""
    return [key for key in summary if key != "total"]


def _run_stages(runs: list[dict]) -> list[str]:
    return next((stage_names(r["stages"]) for r in runs if r.get("stages")), [])


def format_table(report: dict) -> str:
    stages = _run_stages(report["runs"])
    lines = [f"{report['shape']} on {report['gpu']}, {report['frames']} frames, torch {report['torch']}",
             "| runtime | frame p50 ms | frame p99 ms | " + " | ".join(stages)
             + " | SPEAK s/s mean | state 10s/30s/120s MiB | peak GiB |",
             "|---" * (len(stages) + 6) + "|"]
    for r in report["runs"]:
        if r.get("failure"):
            lines.append(f"| {r['name']} | failed: {r['failure']} |")
            continue
        st, mib = r["stages"], 1 << 20
        state = "/".join(f"{r['state_bytes'].get(f'{s}s', float('nan')) / mib:.0f}" for s in CHECKPOINTS_S)
        lines.append(f"| {r['name']} | {st['total']['p50_ms']:.2f} | {st['total']['p99_ms']:.2f} | "
                     + " | ".join(f"{st[k]['p50_ms']:.2f}" for k in stages)
                     + f" | {r['speak_time']['mean_s']:.3f} | {state} | {r['peak_bytes'] / (1 << 30):.2f} |")
    lines += _kernel_table(report["runs"])
    f, q = report["floor"], report["ratios"]
    lines.append(f"weight-read floor: {f['ms_per_frame']:.2f} ms/frame ({f['lm_bytes'] / 1e9:.1f} GB of LM "
                 f"weights at {f['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s)")
    lines.append("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in q.items()))
    lines += _peak_table(report["runs"])
    if "int8_ratios" in report:
        lines.append("int8: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in report["int8_ratios"].items()))
    lines += startup_lines(report["runs"])
    if "fidelity" in report:
        from .fidelity import format_fidelity
        lines += ["", format_fidelity(report["fidelity"])]
    return "\n".join(lines)


def startup_lines(runs: list[dict]) -> list[str]:
    """How each run starts: getting ready at load, the prompts, then the first frame."""
    lines = ["", "start-up (ours: prepare() at load; stock: its server's warm-up):"]
    for r in runs:
        if r.get("first_frame_ms") is None:
            continue
        parts = [f"ready in {r['prepare_s']:.2f} s" if r.get("prepare_s") is not None else "no warm-up"]
        if r.get("prompt_s") is not None:
            parts.append(f"prompts {r['prompt_s']:.2f} s")
        lines.append(f"- {r['name']}: " + ", ".join(parts) + f", first frame {r['first_frame_ms']:.2f} ms")
    return lines


_NO_KERNELS = {"kernels": 0, "busy_ms": 0.0}


def _kernel_table(runs: list[dict]) -> list[str]:
    """Kernels per frame and GPU busy ms per frame, by stage (a profiled pass)."""
    stages = _run_stages(runs)
    columns = (*stages, "other", "frame")
    lines = ["", "kernels per frame / GPU busy ms per frame (torch.profiler):",
             "| runtime | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in runs:
        k = r.get("kernels") or {}
        if k:
            cells = (k.get(c, _NO_KERNELS) for c in columns)  # a stage no kernel was marked in has none
            lines.append(f"| {r['name']} | " + " | ".join(f"{c['kernels']:.0f} / {c['busy_ms']:.2f}" for c in cells)
                         + " |")
    ours = next((r for r in runs if r["name"].startswith("ours") and r.get("kernels")), None)
    if ours is not None:  # where the first of ours spends each stage's time (the stock runtime's is its own)
        lines.append(f"heaviest kernels of {ours['name']}, per stage (launches / ms per frame):")
        for stage in columns[:-1]:
            heaviest = ours["kernels"].get(stage, _NO_KERNELS).get("heaviest", [])
            if heaviest:
                lines.append(f"- {stage}: " + "; ".join(f"{n} {c:.0f} / {t:.3f}" for n, c, t in heaviest))
        lines.append(f"host before each stage's first device work, and its heaviest CUDA calls, of {ours['name']} "
                     "(profiled frames: each mark synchronizes; calls / ms per frame):")
        for stage in stages:
            k = ours["kernels"].get(stage, _NO_KERNELS)
            if "lead_ms" in k:
                calls = "; ".join(f"{n} {c:.0f} / {t:.3f}" for n, c, t in k["host"])
                lines.append(f"- {stage}: {k['lead_ms']:.3f} ms" + (f" ({calls})" if calls else ""))
    return lines


def _peak_table(runs: list[dict]) -> list[str]:
    """Peak memory so far at each conversation length, and the memory budgets' outcomes."""
    lines = ["", "peak GiB at " + " / ".join(f"{s} s" for s in CHECKPOINTS_S)
             + " (torch's allocations plus mapped state):"]
    for r in runs:
        peaks = "/".join(f"{r['peak_at'][f'{s}s'] / (1 << 30):.2f}" if f"{s}s" in r.get("peak_at", {}) else "-"
                         for s in CHECKPOINTS_S)
        budget = r.get("budget")
        verdict = "" if budget is None else (f"; budget {budget['limit_bytes'] / (1 << 30):.1f} GiB over "
                                             f"{budget['frames']} frames: {'passed' if budget['passed'] else 'FAILED'}")
        lines.append(f"- {r['name']}: {peaks}{verdict}")
    return lines
