"""`python3 -m bench.minicpmo`: our MiniCPM-o 4.5 family against the reference (OpenBMB MiniCPM-o-
Demo), side by side in one process on one random checkpoint written on the machine
(bench.minicpmo_weights), over one committed schedule of listening and speaking units
(bench.minicpmo_schedule), to profile before optimizing.

Per unit, synchronized at its end: its time (prefill + generate + finalize) and each stage's
(encoder, LLM prefill, LLM decode, TTS, tail, finalize); per side: speaking p50/p99/max, listening
p50/p99, units over the one-second cadence, load-to-ready time, peak memory, and kernels and GPU
busy time on a few profiled units, and the streaming state each side holds after 60 and 240 units
(ours: what its stores hold; the reference's: what its cache objects reach). The reference runs
first and is freed before ours loads. Lines print as they come; the JSON is rewritten as the run
goes. `--size tiny` runs the same on the CPU with tiny sizes (the full-size tail kept)."""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from .minicpmo_schedule import STAGES, TEXT, Forcing, StageClock, Unit, ratios, same_work, schedule, summarize

SIDES = ("reference", "ours")
STATE_AT = (60, 240)
"""Units (seconds) after which each side's streaming state is measured (and after its last)."""
SHORT = {"encoder": "enc", "llm_prefill": "pre", "llm_decode": "dec", "tts": "tts", "tail": "tail",
         "finalize": "fin", "other": "oth"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m bench.minicpmo",
                                     description="our MiniCPM-o 4.5 family against the reference, side by side")
    parser.add_argument("--reference", type=Path, required=True, help="a MiniCPM-o-Demo checkout (its MiniCPMO45/)")
    parser.add_argument("--output", type=Path, required=True, help="the JSON report")
    parser.add_argument("--units", type=int, default=240, help="units (seconds) per side (default 240)")
    parser.add_argument("--size", choices=["full", "tiny"], default="full",
                        help="full: the real sizes on a CUDA GPU; tiny: tiny sizes on the CPU")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="both sides' weights (default bf16)")
    parser.add_argument("--window", choices=["basic", "off"], default="basic",
                        help="the context window, both sides (default basic, 4000/3500 tokens)")
    parser.add_argument("--text-only", action="store_true",
                        help="no token2wav tail in the folder: neither side makes audio (the TTS still runs); "
                             "for a quick check on the CPU, where the full-size tail takes seconds a chunk")
    parser.add_argument("--scratch", type=Path, help="where the checkpoint is written and kept for the next run on "
                                                     "this machine (default: a temporary folder, deleted; the full "
                                                     "size needs about 20 GB)")
    parser.add_argument("--weights", choices=["bf16", "int8", "int4"], default="bf16",
                        help="our side's weights (the reference runs in --dtype); int8 and int4 are quantized at load")
    parser.add_argument("--sides", choices=["both", "ours"], default="both",
                        help="ours: our side alone (its memory and times in another format, say)")
    parser.add_argument("--no-graphs", action="store_true",
                        help="our side without CUDA graph replay (every stage launched from Python), to show the "
                             "difference; the output is the same")
    parser.add_argument("--card-gib", type=float,
                        help="our side under the memory budget of a card this size (engine.state.memory_budget): "
                             "the size less the CUDA context measured before it loads; the run fails where it "
                             "would not fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=int, default=2,
                        help="units profiled per side on CUDA (a speaking and a listening one; 0: none)")
    parser.add_argument("--deadline-s", type=float,
                        help="stop the first side's units early so that both fit in this many seconds from the "
                             "start; the second then runs what it can of the schedule, compared on the units both ran")
    parser.add_argument("--first-share", type=float, default=0.5,
                        help="with --deadline-s, the share of the time left after the checkpoint that the first side "
                             "(the reference) may take (default 0.5; ours runs the same units many times faster)")
    return parser


def unit_audio(units: int) -> list[np.ndarray]:
    """One-second 16 kHz inputs: assets/speech_sample.wav (24 kHz) resampled, cycled."""
    import soundfile as sf
    from scipy.signal import resample_poly

    speech, rate = sf.read(Path(__file__).resolve().parents[1] / "assets" / "speech_sample.wav", dtype="float64")
    pcm = resample_poly(speech, 2, 3).astype(np.float32) if rate == 24000 else speech.astype(np.float32)
    chunks = [pcm[i * 16000:(i + 1) * 16000] for i in range(len(pcm) // 16000)]
    return [chunks[i % len(chunks)] for i in range(units)]


def profiled_units(plan: list[Unit], count: int) -> set[int]:
    """The first speaking unit inside a run (neither a turn's first nor last) and the first
    listening one inside a run, past the first ten units: early, so that a side cut short by
    the deadline is still profiled."""
    picks: list[int] = []
    for kind in ("speak", "listen"):
        found = [i for i in range(10, len(plan)) if plan[i].kind == kind and plan[i - 1].kind == kind
                 and not plan[i].end_of_turn]
        picks += found[:1]
    return set(picks[:count])


def _profiled(call, clock: StageClock) -> tuple[dict, dict]:
    """`call()` under torch.profiler, each lap of the clock a stage marker (bench.kernels)."""
    from .kernels import _PREFIX, attribute, trace_events

    lap = clock.lap

    def marked(stage: str) -> None:
        lap(stage)
        with torch.profiler.record_function(_PREFIX + stage):
            pass

    clock.lap = marked
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            result = call()
    finally:
        del clock.lap
    stages = attribute(trace_events(prof), 1)
    return result, {"kernels": stages.pop("frame")["kernels"], "busy_ms": sum(s["busy_ms"] for s in stages.values()),
                    "stages": {k: {"kernels": v["kernels"], "busy_ms": v["busy_ms"], "heaviest": v["heaviest"][:4]}
                               for k, v in stages.items() if v["kernels"]}}


def run_side(kind, args, folder: Path, device: torch.device, plan: list[Unit], audio: list[np.ndarray],
             words: list[int], ids: dict, stop_at: float | None, save, out: dict) -> dict:
    """Loads one side, runs `plan` (until `stop_at`, a perf_counter time, if given) into `out`
    (the report's entry, saved as it fills), frees it."""
    from .minicpmo_sides import device_used, memory_now

    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    before = device_used(device) if cuda else None
    forcing = Forcing(plan, ids["listen"], ids["turn_eos"], words)
    clock = StageClock(device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    extra = {"graphs": not args.no_graphs, "weights": args.weights} if kind.name == "ours" else {}
    side = kind(args.reference, folder, device, dtype, forcing, clock, args.seed, args.window, **extra)
    out.update(load_s=side.load_s, ready_s=side.ready_s, units=[], memory_at_load=side.memory_at_load,
               memory_at_ready=side.memory_at_ready)
    if cuda:
        out.update(device_used_before_bytes=before, device_used_ready_bytes=device_used(device))
        if hasattr(side, "graph_memory"):
            out["graphs_at_ready"] = side.graph_memory()
            print(f"{side.name}: graphs at ready, outside torch's pools: " + ", ".join(
                f"{kind} {g['graphs']} ({g['bytes'] / 2**20:.0f} MiB)" for kind, g in out["graphs_at_ready"].items()),
                flush=True)
    print(f"{side.name}: loaded in {side.load_s:.1f} s, ready in {side.ready_s:.1f} s", flush=True)
    profiled = profiled_units(plan, args.profile) if cuda else set()
    used_max = 0
    try:
        for i, (unit, samples) in enumerate(zip(plan, audio)):
            if stop_at is not None and time.perf_counter() > stop_at:
                out["cut_at_unit"] = i
                if i and str(i) not in out.get("state_bytes", {}):
                    _state(side, i, out)
                print(f"{side.name}: stopped at unit {i} to keep within the deadline", flush=True)
                break
            forcing.begin(i)
            clock.begin()
            record = {"unit": i, "kind": unit.kind, "end_of_turn_planned": unit.end_of_turn}
            if i in profiled:
                made, record["profile"] = _profiled(functools.partial(side.unit, samples), clock)
                record["profiled"] = True
            else:
                made = side.unit(samples)
            stages = clock.end()
            if hasattr(side, "spare"):
                record["spare_ms"] = side.spare()
            record.update(ms=sum(stages.values()), stages=stages, decodes=forcing.decodes[i], **made)
            record["as_planned"] = made["listen"] == (unit.kind != "speak") and made["end_of_turn"] == unit.end_of_turn
            out["units"].append(record)
            if i + 1 in STATE_AT or i + 1 == len(plan):
                _state(side, i + 1, out)
            if cuda:
                used_max = max(used_max, device_used(device))
            print(f"{side.name} unit {i:3d} {unit.kind:6s} {record['ms']:8.1f} ms | "
                  + " ".join(f"{SHORT[s]} {stages[s]:.1f}" for s in STAGES)
                  + f" | dec {record['decodes']} tts {made['speech_tokens']} wav {made['audio_samples']}"
                  + f" ctx {made['context']}"
                  + ("" if record["as_planned"] else " NOT AS PLANNED") + (" (profiled)" if i in profiled else ""),
                  flush=True)
            if i % 30 == 29:
                save()
    finally:
        if out["units"] and "eager_runs" in out["units"][-1]:
            out["eager_stage_runs"] = out["units"][-1]["eager_runs"]  # cumulative since ready
            out["eager_stage_keys"] = [(i, key) for i, unit in enumerate(out["units"]) for key in unit["eager_keys"]]
        if cuda:
            out.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(device), device_used_max_bytes=used_max,
                       memory_at_end=memory_now(device))
        out["summary"] = summarize(out["units"])
        spare = [u["spare_ms"] for u in out["units"] if u.get("spare_ms", 0) > 1]
        if spare:
            out["summary"]["spare"] = {"units": len(spare), "ms_total": sum(spare), "ms_max": max(spare)}
        side.close()  # the next side loads into a freed device
    return out


def _state(side, units: int, out: dict) -> None:
    """The side's streaming state after `units` units (and ours' regions against their clocks)."""
    out.setdefault("state_bytes", {})[str(units)] = side.state_bytes()
    if hasattr(side, "state_against_clocks"):
        out.setdefault("state_against_clocks", {})[str(units)] = side.state_against_clocks()


def _show(name: str, result: dict) -> None:
    s = result["summary"]
    sp, li = s["speaking"], s["listening"]
    line = f"{name}: ready {result['ready_s']:.1f} s; speaking {sp['count']}"
    if sp["count"]:
        line += f" p50 {sp['p50_ms']:.1f} p99 {sp['p99_ms']:.1f} max {sp['max_ms']:.1f} ms"
    line += f"; listening {li['count']}"
    if li["count"]:
        line += f" p50 {li['p50_ms']:.1f} p99 {li['p99_ms']:.1f} ms"
    line += f"; over 1 s: {s['over_cadence']}"
    if result.get("state_bytes"):
        line += "; state " + ", ".join(f"{v / 2**20:.1f} MiB after {k} s" for k, v in result["state_bytes"].items())
    for units, check in result.get("state_against_clocks", {}).items():
        (region, most), over = check["largest"], len(check["over_a_granule"])
        line += (f"; after {units} s {check['excess_bytes'] / 2**20:.2f} MiB past the clocks (most: {region} "
                 f"{most / 2**20:.2f} MiB; over a granule: {over})")
    if "eager_stage_runs" in result:
        line += f"; eager stage runs {result['eager_stage_runs']}"
        line += "".join(f" (unit {i}: {key})" for i, key in result.get("eager_stage_keys", []))
    if "spare" in s:
        line += (f"; spare time used after {s['spare']['units']} units ({s['spare']['ms_total']:.0f} ms in all, "
                 f"{s['spare']['ms_max']:.0f} ms at most)")
    if "peak_allocated_bytes" in result:
        line += (f"; peak allocated {result['peak_allocated_bytes'] / 2**30:.2f} GiB, "
                 f"device used at most {result['device_used_max_bytes'] / 2**30:.2f} GiB")
    print(line, flush=True)
    for when in ("load", "ready", "end"):
        m = result.get(f"memory_at_{when}")
        if m:
            print(f"{name}: memory at {when}: device used {m['device_used_bytes'] / 2**30:.2f} GiB, torch reserved "
                  f"{m['reserved_bytes'] / 2**30:.2f} ("
                  + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in m["reserved_by_pool_bytes"].items())
                  + f"), allocated {m['allocated_bytes'] / 2**30:.2f} GiB", flush=True)
    if s.get("speaking_stage_mean_ms"):
        print(f"{name}: speaking unit mean by stage: "
              + ", ".join(f"{k} {v:.1f}" for k, v in s["speaking_stage_mean_ms"].items()) + " ms", flush=True)


def run(args) -> dict:
    started = time.perf_counter()
    full = args.size == "full"
    if full and not torch.cuda.is_available():
        raise SystemExit("python3 -m bench.minicpmo --size full needs a CUDA GPU (torch sees none); --size tiny runs "
                         "on the CPU")
    if args.units < 1:
        raise SystemExit("--units must be at least 1")
    device = torch.device("cuda" if full else "cpu")
    from .minicpmo_sides import Ours, Reference, on_card
    from .minicpmo_weights import random_checkpoint

    report: dict = {"bench": "minicpmo", "size": args.size, "dtype": args.dtype, "window": args.window,
                    "graphs": not args.no_graphs, "weights": args.weights, "sides": args.sides,
                    "tail": not args.text_only,
                    "units_requested": args.units, "seed": args.seed, "torch": torch.__version__,
                    "python": platform.python_version(), "device": torch.cuda.get_device_name() if full else "cpu"}

    def save() -> None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=1))

    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    tmp_root = args.scratch or (None if full else "/dev/shm" if Path("/dev/shm").is_dir() else None)
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        folder, report["checkpoint"] = random_checkpoint(args.reference, args.size, device, args.seed,
                                                         not args.text_only, Path(tmp), args.scratch)
        import transformers
        report["transformers"] = transformers.__version__
        print(f"checkpoint: {report['checkpoint']['parameters'] / 1e9:.2f} B parameters, "
              f"{report['checkpoint']['bytes'] / 2**30:.2f} GiB, written in {report['checkpoint']['write_s']:.1f} s",
              flush=True)
        from engine.families.minicpmo.text_tokens import TextTokens
        tokens = TextTokens(folder)
        ids = {"listen": tokens.id("<|listen|>"), "turn_eos": tokens.id("<|turn_eos|>")}
        plan, audio = schedule(args.units), unit_audio(args.units)
        report["schedule"] = {"speaking": sum(u.kind == "speak" for u in plan),
                              "listening": sum(u.kind != "speak" for u in plan),
                              "turns": sum(u.end_of_turn for u in plan)}
        save()
        sides = list(zip(SIDES, (Reference, Ours)))[1 if args.sides == "ours" else 0:]
        for name, kind in sides:
            stop_at = None
            if args.deadline_s:
                # The first side takes its share of the time left; the second runs until shortly
                # before the deadline.
                left = args.deadline_s - (time.perf_counter() - started)
                first = name == sides[0][0] and len(sides) > 1
                stop_at = (time.perf_counter() + left * args.first_share - 30 if first
                           else started + args.deadline_s - 20)
            report[name] = {}
            try:
                with on_card(args, device, report[name]) if name == "ours" else contextlib.nullcontext():
                    run_side(kind, args, folder, device, plan, audio, tokens.encode(TEXT), ids, stop_at, save,
                             report[name])
            except Exception as error:  # the other side still runs: its profile stands alone
                traceback.print_exc()
                report[name]["failure"] = f"{type(error).__name__}: {error}"
                print(f"{name} failed: {report[name]['failure']}", flush=True)
                save()
                continue
            _show(name, report[name])
            save()
    report["units_run"] = {name: len(report[name].get("units", [])) for name, _ in sides}
    failed = [name for name, _ in sides if "failure" in report[name]]
    if failed:
        save()
        raise RuntimeError(f"{' and '.join(failed)} failed (the report holds what ran)")
    if len(sides) == 1:
        report["total_s"] = time.perf_counter() - started
        save()
        return report
    # Ours runs the whole schedule where the deadline cut the reference: compared on the units both ran.
    common = min(len(report["reference"]["units"]), len(report["ours"]["units"]))
    ours_common = dict(report["ours"], summary=summarize(report["ours"]["units"][:common]))
    report["ratios_reference_over_ours"] = dict(ratios(report["reference"], ours_common), units=common)
    report["same_work"] = same_work(report["reference"]["units"], report["ours"]["units"])
    report["total_s"] = time.perf_counter() - started
    save()
    q = report["ratios_reference_over_ours"]
    print(f"reference over ours, units 0-{common - 1}: "
          + ", ".join(f"{k} {v:.2f}" for k, v in q.items() if isinstance(v, float)), flush=True)
    print(f"same work: {report['same_work']}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    from app.cli.commands import run_command
    return run_command(run, build_parser().parse_args(argv), "python3 -m bench.minicpmo")


if __name__ == "__main__":
    sys.exit(main())
