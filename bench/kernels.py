"""Kernels per frame and GPU busy time per stage, from a torch.profiler trace.

While profiling, the frame timer's marks synchronize and drop a named marker into the trace, so
every kernel (graph-replayed ones included) falls between its stage's markers; kernels after a
`mark(None)` belong to "other". Busy time is the union of the kernels', copies' and memsets'
intervals, each kernel counted only from where the work before it ended (an overlapped launch
waits for its predecessor inside its own duration), so the names' times add up to the busy
time. A stage's time to its first device work is the host's, reported with its CUDA calls. The
synchronizations slow these frames, so they are profiled apart from the timed ones.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from engine.runtime.timing import FrameTimer

from .graph_timing import replay_ms

PROFILED_FRAMES = 20
HEAVIEST = 6
_PREFIX = "duplexcadence.stage:"
_OTHER = "other"


@contextlib.contextmanager
def _marking(timer: FrameTimer) -> Iterator[None]:
    """Each of `timer`'s marks first synchronizes and records its stage's marker: the
    instance's `mark` is wrapped (the frame loop looks it up each frame), then restored."""
    mark = timer.mark

    def marked(stage: str | None) -> None:
        torch.cuda.synchronize()
        with torch.profiler.record_function(_PREFIX + (stage or _OTHER)):
            pass
        mark(stage)

    timer.mark = marked
    try:
        yield
    finally:
        del timer.mark


def profile_stages(step: Callable[[], None], timer: FrameTimer, frames: int = PROFILED_FRAMES) -> dict:
    """Runs `step` (one frame, timed by `timer`) `frames` times under the profiler. Returns,
    per stage and for the whole frame, kernels per frame and GPU busy ms per frame."""
    torch.cuda.synchronize()
    with _marking(timer), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                             torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(frames):
            step()
        torch.cuda.synchronize()
    return attribute(trace_events(prof), frames)


def trace_events(prof: torch.profiler.profile) -> list[dict]:
    """A finished profile's Chrome-trace events."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())["traceEvents"]


def device_work(events: list[dict]) -> tuple[list[tuple[float, float, bool, str]], list[float]]:
    """(start, end, is a kernel, name) of the kernels, copies and memsets, in start order, and
    the time each adds past the work before it (`exclusive`), in the same order."""
    work = sorted((e["ts"], e["ts"] + e.get("dur", 0), e.get("cat") == "kernel", e.get("name", "?")) for e in events
                  if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    return work, exclusive([(w[0], w[1]) for w in work])


def attribute(events: list[dict], frames: int) -> dict:
    """Chrome-trace events -> {stage: {"kernels": per frame, "busy_ms": per frame, "heaviest":
    [[name, launches per frame, ms per frame], ...], "lead_ms": per frame, "host": [[name,
    calls per frame, ms per frame], ...]}}. The marks synchronize, so a stage starts with the
    device idle: `lead_ms` is the time from the mark before it to its first device work (what
    the host does before the device has anything of the stage to run), and `host` the heaviest
    CUDA runtime and driver calls the host made in the stage (a graph's launch among them)."""
    markers = sorted((e["ts"], e["name"][len(_PREFIX):]) for e in events
                     if e.get("ph") == "X" and e.get("name", "").startswith(_PREFIX))
    times = [ts for ts, _ in markers]
    work, owns = device_work(events)
    names = dict.fromkeys(name for _, name in markers)  # the stages marked, in the order they ran
    stages = {s: {"kernels": 0, "intervals": [], "names": {}, "lead": 0.0, "host": {}} for s in (*names, _OTHER)}

    def stage_at(ts: float) -> tuple[int, str]:
        """The index of the first marker after `ts` and its stage (after the last: the frame's
        tail, its host copy)."""
        i = bisect.bisect_left(times, ts)
        return i, _OTHER if i == len(markers) else markers[i][1]

    led = set()
    for (start, end, is_kernel, name), own in zip(work, owns):
        i, label = stage_at(start)
        if i not in led and 0 < i < len(markers):
            led.add(i)
            stages[label]["lead"] += start - markers[i - 1][0]
        stages[label]["kernels"] += is_kernel
        stages[label]["intervals"].append((start, end))
        count, total = stages[label]["names"].get(name, (0, 0.0))
        stages[label]["names"][name] = (count + 1, total + own)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            host = stages[stage_at(e["ts"])[1]]["host"]
            count, total = host.get(e["name"], (0, 0.0))
            host[e["name"]] = (count + 1, total + e.get("dur", 0))
    out = {s: {"kernels": v["kernels"] / frames, "busy_ms": _union(v["intervals"]) / 1000 / frames,
               "heaviest": _heaviest(v["names"], frames), "lead_ms": v["lead"] / 1000 / frames,
               "host": _heaviest(v["host"], frames)}
           for s, v in stages.items()}
    out["frame"] = {"kernels": sum(v["kernels"] for v in out.values()),
                    "busy_ms": sum(v["busy_ms"] for v in out.values())}
    return out


def exclusive(intervals: list[tuple[float, float]]) -> list[float]:
    """Each interval's time past the end of every one that started before it (sorted by
    start): what it adds to their union."""
    out, reach = [], float("-inf")
    for start, end in intervals:
        out.append(max(0.0, end - max(start, reach)))
        reach = max(reach, end)
    return out


def replayed_kernels(work: Callable[[], None], frames: int) -> tuple[list[list], float, list[list]]:
    """`work` captured in a CUDA graph and replayed `frames` times under the profiler: [[name,
    launches per replay, µs per replay], ...] heaviest first (each kernel's `exclusive` time),
    their summed µs (the replay's busy time), and the last replay's launches in order: [[name,
    grid, µs], ...] (which of a kind's launches the time goes to)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(frames):
            graph.replay()
        torch.cuda.synchronize()
    events = trace_events(prof)
    names: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for (_, _, _, name), own in zip(*device_work(events)):
        names[name[:90]][0] += 1
        names[name[:90]][1] += own
    rows = sorted(([n, c / frames, round(t / frames, 2)] for n, (c, t) in names.items()), key=lambda r: -r[2])
    return rows, round(sum(r[2] for r in rows), 1), last_launches(events, frames)


def last_launches(events: list[dict], frames: int) -> list[list]:
    """The last of `frames` alike replays' kernels, copies and memsets, in order: [[name, grid
    (None for a copy), µs (`exclusive`)], ...]."""
    work, owns = device_work(events)
    grids = {(e["ts"], e.get("name", "?")): e.get("args", {}).get("grid") for e in events
             if e.get("ph") == "X" and e.get("cat") == "kernel"}
    last = len(work) // frames
    return [[name[:60], grids.get((start, name)), round(own, 2)]
            for (start, _, _, name), own in zip(work[-last:], owns[-last:])]


def replayed_profile(work: Callable[[], None], replays: int) -> dict:
    """`work` timed graph-replayed (ms per replay), then profiled: kernels per replay, busy µs and
    each kernel name's launches and µs (replayed_kernels)."""
    ms = replay_ms(work, replays, warmup=3)
    rows, busy, launches = replayed_kernels(work, 10)
    return {"replayed_ms": round(ms, 4), "kernels_per_frame": sum(r[1] for r in rows), "busy_us": busy,
            "kernels": rows, "launches": launches}


def profile_parts(parts: dict[str, Callable[[], None]], replays: int, top: int, launches: bool = False) -> dict:
    """{"device", "torch", and each part's replayed_profile}, each part printed as soon as it is
    measured: the first run on a machine compiles every kernel, and a call cut short still
    shows what it measured."""
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    with torch.no_grad():
        for part, work in parts.items():
            out[part] = replayed_profile(work, replays)
            print_profile(part, out[part], top, launches)
    return out


def add_profile_arguments(parser: argparse.ArgumentParser, top: int) -> None:
    """A replayed profile's printout options on a bench's command line: --top, --launches."""
    parser.add_argument("--launches", action="store_true", help="print every launch of a replay in order")
    parser.add_argument("--top", type=int, default=top, help=f"kernel names printed per part (default: {top})")


def print_profile(part: str, r: dict, top: int, launches: bool = False) -> None:
    """A replayed_profile's figures and its `top` heaviest kernels (and with `launches` every
    launch of a replay in order), flushed as they are printed."""
    print(f"{part}: {r['replayed_ms']:.3f} ms replayed, {r['kernels_per_frame']:.0f} kernels, "
          f"{r['busy_us']:.0f} µs busy", flush=True)
    for name, count, us in r["kernels"][:top]:
        print(f"  {us:8.2f} µs  {count:4.0f}x  {name}", flush=True)
    for name, grid, us in r.get("launches", []) if launches else []:
        print(f"  {us:8.2f} µs  {str(grid):16}  {name}", flush=True)


def _heaviest(names: dict[str, tuple[int, float]], frames: int) -> list[list]:
    """The HEAVIEST names by summed duration: [name (shortened), launches per frame, ms per
    frame], what a stage's time goes to."""
    ranked = sorted(names.items(), key=lambda item: -item[1][1])[:HEAVIEST]
    return [[name if len(name) <= 80 else name[:77] + "...", count / frames, total / 1000 / frames]
            for name, (count, total) in ranked]


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
