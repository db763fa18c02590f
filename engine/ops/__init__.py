"""The one seam where torch or Triton is chosen. Models (engine.transformer, a family's modules such
as engine.families.moshi.lm and .mimi) call the functions here and never import engine.kernels.
Each holds the torch formula (CPU, and CUDA without Triton) and the rule for when its Triton kernel
runs instead: static facts only (the device, Triton and a compiler present, the shapes,
`DUPLEXCADENCE_TORCH_KERNELS`), never a runtime toggle, so graph replay and demand-sized state
always run the same kernels. dispatch.py: `use_triton`, the machine test they all share (logs once
why the kernels are off); linear.py: matmul, linear, linear_embed, embedding; norm.py: rms_norm;
rope.py: RoPE tables and rotation; attention.py: attention over a ring KV cache; fused.py: the
fused layer's decision and products; sampling.py: the top-k / temperature exponential race;
codebooks.py: Mimi's quantizer (nearest centroids, their sum); conv.py: a streaming (transposed)
convolution's chunk, ELU and residual fused; delays.py: the token delay lines' per-frame steps.
This package's __init__ imports none of them (its modules import `dispatch` through it).
"""
