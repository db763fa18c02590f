"""DuplexCadence runtime: demand-sized state at stable addresses, attention that reads its
valid length from device memory, fused per-layer kernels, and CUDA graph capture/replay.

Nothing here needs CUDA to import: the CUDA driver bindings and Triton load on first use.
"""
from .graphs import StageGraphs
from .placement import DemandStore
from .ring_attention import ring_attention

__all__ = ["DemandStore", "StageGraphs", "ring_attention"]
