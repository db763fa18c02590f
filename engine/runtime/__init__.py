"""The DuplexCadence runtime, used by the session layer and the benchmark: placement of declared state
(demand-sized at stable addresses through CUDA virtual memory), the frame runner (stages,
clock ticks, CUDA graph capture and replay) and frame timing.

Nothing here needs CUDA to import: the CUDA driver bindings load on first use.
"""
