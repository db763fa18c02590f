"""Timing work the way a frame runs it: captured once in a CUDA graph, then replayed."""
from __future__ import annotations

import torch


def replay_ms(work, replays: int, warmup: int = 1) -> float:
    """Milliseconds per replay of a graph of `work()`, run once eagerly first (compilation,
    lazy initialisation) and replayed `warmup` times before the timed replays."""
    work()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    for _ in range(warmup):
        graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / replays
