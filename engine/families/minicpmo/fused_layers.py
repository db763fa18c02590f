"""MiniCPM-o's two decoders (the Qwen3 LLM, the Llama TTS) a pre-norm layer at a time as few kernels on CUDA
(engine.ops.fused): the input RMSNorm inside the stacked QKV product, the heads' norms (Qwen3's q_norm and
k_norm; none for the Llama), RoPE and the cache writes in one kernel, attention split over the cache (a KV
head's query heads as its rows: engine.ops.attention.grouped_attention), the residuals and the SiLU gate in
the products' epilogues. About 7 kernels a layer where torch's ops take 40 to 60. Each rounding is the torch
formulas' but the two RMSNorms', whose normalised rows stay fp32 into the products, and attention's online
softmax: within the model dtype's noise of the layer as the reference computes it."""
from __future__ import annotations

import torch

from ...kernels import MAX_WAKE_ROWS
from ...kernels.operands import Norm
from ...ops import dispatch, fused
from ...ops.attention import grouped_attention
from .qwen3_weights import GATE_UP, QKV

__all__ = ["fuses", "layer"]


def fuses(layers: list[dict], probe: torch.Tensor, head_dim: int) -> bool:
    """Whether these layers run fused: on the Triton kernels (`probe` a tensor where they run), with the
    stacked products (qwen3_weights.stack_products), no biases and heads of a power of two; a pass's
    rows must also be few enough (`fits`). Static facts: eager and replayed passes choose alike."""
    stacked = all(QKV in w and GATE_UP in w and not any(k.endswith(".bias") for k in w) for w in layers)
    return dispatch.use_triton(probe) and stacked and head_dim & (head_dim - 1) == 0


def fits(rows: int) -> bool:
    return rows <= MAX_WAKE_ROWS


def layer(x: torch.Tensor, w: dict, keys: torch.Tensor, values: torch.Tensor, cos: torch.Tensor,
          sin: torch.Tensor, position: torch.Tensor, span: int, window: int | None, heads: int,
          eps: float) -> torch.Tensor:
    """x [T, H] (rows of unit stride) through one layer with weights `w` (keyed as under `model.layers.{i}.`),
    its cache `keys`, `values` [KV, capacity, D] written at position[0].., each row attending causally (and
    within `window`, if given) over the first `span` entries."""
    count, d = x.shape[0], keys.shape[-1]
    qkv = fused.linear(x, w[QKV], norm=Norm("rms", w["input_layernorm.weight"], None, eps))
    grouped = fused.heads_into_cache(qkv, w.get("self_attn.q_norm.weight"), w.get("self_attn.k_norm.weight"), eps,
                                     cos, sin, position, keys, values, heads)
    out = grouped_attention(grouped, keys, values, position, count, span, window)
    out = out.reshape(heads, count, d).transpose(0, 1).reshape(count, heads * d)
    x = fused.linear(out, w["self_attn.o_proj.weight"], residual=x)
    return fused.gated_ffn(x, w[GATE_UP], w["mlp.down_proj.weight"], residual=x,
                           norm=Norm("rms", w["post_attention_layernorm.weight"], None, eps))
