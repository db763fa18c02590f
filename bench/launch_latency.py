"""Whether a graph's replay from an idle device waits on its launch: the official Mimi's
encode and decode of a frame (random weights, fp32, as a session runs them), each captured
with overlapped launches on and off, timed three ways:

- back to back: the GPU's time per replay when launches queue ahead (bench.graph_timing);
- from idle: host wall time from `replay()` on an idle device to the end of its sync, the
  way a frame's first stage starts (the microphone's frame has just arrived);
- host: the `replay()` call alone (cudaGraphLaunch), on an idle device.

From idle minus back to back is what the frame pays for starting: launch and ramp-up.

    python3 -m bench.launch_latency OUT.json [--replays 200]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from engine.kernels import overlap

from .graph_timing import replay_ms


def _idle_starts(graph: torch.cuda.CUDAGraph, replays: int) -> tuple[float, float]:
    """Median ms (replay() to the end of its sync, replay() alone), each from an idle device."""
    whole, host = [], []
    for _ in range(replays):
        torch.cuda.synchronize()
        start = time.perf_counter()
        graph.replay()
        launched = time.perf_counter()
        torch.cuda.synchronize()
        whole.append(time.perf_counter() - start)
        host.append(launched - start)
    return statistics.median(whole) * 1e3, statistics.median(host) * 1e3


def _part(work, replays: int) -> dict:
    back_to_back = replay_ms(work, replays)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    from_idle, host = _idle_starts(graph, replays)
    return {"back_to_back_ms": round(back_to_back, 4), "from_idle_ms": round(from_idle, 4),
            "replay_call_ms": round(host, 4), "start_cost_ms": round(from_idle - back_to_back, 4)}


def measure(replays: int) -> dict:
    from engine.families.moshi.mimi.codec import Mimi
    from engine.families.moshi.mimi.mimi_config_json import official_config
    from engine.state import FullStore

    torch.manual_seed(0)
    mimi = Mimi(official_config(), 8, "mimi").to("cuda").eval()
    store = FullStore(mimi.regions(), "cuda")
    pcm = torch.randn(1, 1, mimi.frame_size, device="cuda") * 0.1
    enabled, out = overlap.ENABLED, {}
    try:
        with torch.no_grad():
            codes = mimi.encode_step(pcm, store)
            for setting in (True, False):
                overlap.ENABLED = setting
                for name, work in (("encode", lambda: mimi.encode_step(pcm, store)),
                                   ("decode", lambda: mimi.decode_step(codes, store))):
                    out[f"{name}, overlapped {'on' if setting else 'off'}"] = figures = _part(work, replays)
                    print(name, "overlapped", setting, figures, flush=True)
    finally:
        overlap.ENABLED = enabled
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "replays": replays, "parts": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--replays", type=int, default=200, help="replays per figure (default: 200)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "bench.launch_latency: needs a CUDA GPU\n")
    result = measure(args.replays)
    result["command"] = f"python3 -m bench.launch_latency OUT.json --replays {args.replays}"
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
