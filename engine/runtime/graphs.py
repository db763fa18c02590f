"""Captured CUDA graphs by key, sharing one memory pool: how the stage runner
(engine.runtime.stages) replays a family's work.

A key names one exact-shape piece of work (a stage of a frame, a chunk of a stream); the
caller decides when capture is safe (after one eager run of that key has done every lazy
initialisation: kernel compilation, cuBLAS/cuFFT plans, constant tables) and what the key is.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class Graphs:
    """Captured CUDA graphs by key, sharing one memory pool. A generator given here is
    registered with each graph, so a replay draws the same random numbers as the eager path.

    A graph captured later may hold its outputs where an earlier one keeps scratch memory, so
    every output is read before another graph replays, unless the graphs always replay in
    the order they were captured."""

    def __init__(self, device: torch.device, generator: torch.Generator | None = None):
        self.device, self.generator = device, generator
        self.pool = None
        self._stream: torch.cuda.Stream | None = None  # captures run on a stream of their own
        self.graphs: dict[Any, tuple[torch.cuda.CUDAGraph, Any]] = {}
        self.outside_bytes: dict[Any, int] = {}
        """Device memory each key's capture took outside torch's allocator (the executable graph's
        own, as the driver makes it): where a process's memory goes beside its tensors."""

    def capture(self, key: Any, stage: Callable[[], Any], into: Any = None) -> Any:
        """Record `stage` as the graph of `key` without running it (a replay runs it); returns
        its outputs. `into`: outputs of an earlier capture of the same work (tensors, nested in
        tuples as `stage` returns them) that this graph writes its own into, so the graphs of
        other keys that read them read this one's."""
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:
            graph.register_generator_state(self.generator)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        stream = self.capture_stream()
        # As torch.cuda.graph captures, without emptying the allocator's cache (and, in older
        # torch, collecting garbage) before each capture: a regeneration captures between frames.
        torch.cuda.synchronize(self.device)
        before = _outside_torch(self.device)
        with torch.cuda.stream(stream):
            graph.capture_begin(self.pool)
            try:
                outputs = stage()  # recorded, not run
                if into is not None:
                    outputs = _copy_into(into, outputs)
            finally:
                graph.capture_end()
        self.outside_bytes[key] = _outside_torch(self.device) - before
        self.graphs[key] = graph, outputs
        return outputs

    def capture_stream(self) -> torch.cuda.Stream:
        """The stream captures run on (their own): where per-stream state a kernel makes on first use must
        be made before the first capture (engine.kernels.split_sums.ready)."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream

    def run(self, key: Any) -> Any:
        """Replay the graph of `key` (captured); returns the outputs its capture recorded
        (rewritten by each replay)."""
        graph, outputs = self.graphs[key]
        graph.replay()
        return outputs

    def clear(self) -> None:
        self.graphs.clear()
        self.outside_bytes.clear()
        self.pool = None


def _copy_into(into: Any, outputs: Any) -> Any:
    """Copy `outputs` into the tensors of `into`, of the same structure; returns `into`."""
    if isinstance(into, torch.Tensor):
        into.copy_(outputs)
    elif isinstance(into, tuple):
        for a, b in zip(into, outputs, strict=True):
            _copy_into(a, b)
    elif into != outputs:
        raise ValueError(f"a stage's outputs changed: {outputs!r} where its first capture gave {into!r}")
    return into


def _outside_torch(device: torch.device) -> int:
    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)
