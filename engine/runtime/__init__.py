"""DuplexCadence runtime primitives: demand-sized state at stable addresses, ring attention
that reads its valid length from device memory, and graph-safe seeded sampling.

Nothing here needs CUDA to import: the CUDA driver bindings and Triton load on first use.
"""
from .placement import DemandStore
from .ring_attention import ring_attention
from .sampling import SamplingConfig, advance_rng, rng_region, sample, seed_rng

__all__ = ["DemandStore", "SamplingConfig", "advance_rng", "ring_attention", "rng_region",
           "sample", "seed_rng"]
