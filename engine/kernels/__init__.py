"""Kernels the models call: attention over a ring KV cache that reads its valid length from
device memory, and fused RMSNorm and RoPE. Triton loads on first use, on CUDA only."""
