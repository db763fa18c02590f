"""The one seam where torch or Triton is chosen.

Models (engine.transformer, a family's modules such as engine.families.moshi.lm and .mimi)
call the functions here and never import engine.kernels. Each function holds the torch
formula (the CPU path, and CUDA without Triton) and the rule for when the Triton kernel runs
instead; `dispatch.use_triton` is the one test
of the machine they all share. The rules depend on static facts only (the device, Triton and
a compiler present, `DUPLEXCADENCE_TORCH_KERNELS`, the shapes), never on a runtime toggle, so
graph replay and demand-sized state always run the same kernels.

- dispatch.py: use_triton(x), the machine test (logs once why the kernels are off);
- linear.py: products with bf16 or int8 weights (matmul, linear, linear_embed, embedding);
- norm.py: rms_norm; rope.py: the RoPE tables and rotation;
- attention.py: attention over a ring KV cache;
- fused.py: the fused transformer layer's decision and its products;
- sampling.py: the top-k / temperature exponential race;
- codebooks.py: Mimi's quantizer (each codebook's nearest centroid, the sum of the chosen ones);
- conv.py: one chunk of a streaming convolution (SEANet), ELU and residual fused;
- delays.py: the token delay lines' per-frame steps.

This package's __init__ imports none of them (its modules import `dispatch` through it).
"""
