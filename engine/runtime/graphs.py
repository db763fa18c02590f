"""Exact-shape CUDA graph capture and replay: the one place that owns graphs.

A stage (encode, backbone, depformer, decode) is a function of static input buffers that
writes static outputs. It is captured once per phase key and replayed every frame after.
Shapes never depend on clock values (kernels read those from device memory), and the
state it touches never moves (StateStore or DemandStore), so one graph serves every
frame of its phase. What invalidates graphs: moving the state (switching placement) or
new weights; `clear()` then drops them and the next frame captures again.

Capture records work without running it, so `run` replays right after capturing. The
graphs share one memory pool. Random draws from the session's generator are registered
with each graph, so a replay consumes the same random numbers as the eager path would.
"""
from __future__ import annotations

from typing import Any, Callable

import torch


class StageGraphs:
    def __init__(self, device: torch.device, generator: torch.Generator | None = None):
        self.device = device
        self.generator = generator
        self.pool = None
        self._graphs: dict[Any, tuple[torch.cuda.CUDAGraph, Any]] = {}

    def __len__(self) -> int:
        return len(self._graphs)

    def run(self, key: Any, stage: Callable[[], Any]) -> Any:
        """Replay the graph captured for `key` (capturing it from `stage` the first time);
        returns the stage's static outputs."""
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(stage)
        graph, outputs = entry
        graph.replay()
        return outputs

    def _capture(self, stage: Callable[[], Any]):
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:
            graph.register_generator_state(self.generator)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize(self.device)
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = stage()
        return graph, outputs

    def clear(self) -> None:
        self._graphs.clear()
        self.pool = None
