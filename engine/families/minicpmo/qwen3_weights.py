"""Qwen3's sizes read from a config (transformers 4.51's defaults where a key is absent), its tensors picked out of
a MiniCPM-o checkpoint, placed on a device, and its rotary frequencies (rope_scaling included): what `qwen3.py`'s
model is built from."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...errors import CheckpointError
from ...ops.linear import stacked

__all__ = ["GATE_UP", "QKV", "Qwen3Sizes", "Qwen3Weights", "llm_weights", "placed", "rope_inv_freq", "stack_products"]

_LAYER_KEYS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
               "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
               "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
               "input_layernorm.weight", "post_attention_layernorm.weight")
QKV = "self_attn.qkv_proj.weight"
"""A layer's q, k and v products stacked (stack_products): not a checkpoint key."""
GATE_UP = "mlp.gate_up_proj.weight"
"""A layer's gate and up products stacked: not a checkpoint key."""
_STACKS = {QKV: ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
           GATE_UP: ("mlp.gate_proj.weight", "mlp.up_proj.weight")}
_BIAS_KEYS = ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias", "self_attn.o_proj.bias")


@dataclass(frozen=True)
class Qwen3Sizes:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    rope_scaling: tuple  # sorted (key, value) pairs of config["rope_scaling"], () when absent
    max_positions: int
    tied: bool
    # transformers 4.51 Qwen3Model._prepare_4d_causal_attention_mask_with_cache_position clips the causal mask to
    # `config.sliding_window` in every layer whenever it is not None, whatever use_sliding_window says (sdpa and
    # eager; flash_attention_2 does not). Qwen3Config's default is 4096, so a config.json without the key gets it.
    attention_window: int | None

    @classmethod
    def from_config(cls, config: dict) -> Qwen3Sizes:
        # MiniCPMOConfig is a Qwen3Config (configuration_minicpmo.py:177, kwargs go to super().__init__ at :260):
        # the LLM's keys sit at the top level, with transformers 4.51 configuration_qwen3.py:152-173's defaults.
        heads = int(config.get("num_attention_heads", 32))
        kv_heads = config.get("num_key_value_heads", heads)  # None means MHA (configuration_qwen3.py:187)
        scaling = config.get("rope_scaling") or {}
        window = config.get("sliding_window", 4096)
        return cls(
            vocab=int(config.get("vocab_size", 151936)), hidden=int(config.get("hidden_size", 4096)),
            intermediate=int(config.get("intermediate_size", 22016)),
            layers=int(config.get("num_hidden_layers", 32)), heads=heads,
            kv_heads=int(heads if kv_heads is None else kv_heads),
            # Qwen3Config always sets head_dim (default 128), so Qwen3Attention never falls back to hidden // heads.
            head_dim=int(config.get("head_dim", 128) or config.get("hidden_size", 4096) // heads),
            eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=float(config.get("rope_theta", 10000.0)),
            rope_scaling=tuple(sorted(scaling.items())),
            max_positions=int(config.get("max_position_embeddings", 32768)),
            tied=bool(config.get("tie_word_embeddings", False)),
            attention_window=None if window is None else int(window))


@dataclass
class Qwen3Weights:
    embed: torch.Tensor  # [V, H]
    layers: list[dict[str, torch.Tensor]]  # per layer, keyed as under `llm.model.layers.{i}.`
    norm: torch.Tensor  # [H]
    lm_head: torch.Tensor  # [V, H]; the embedding itself when tied


def llm_weights(weights: dict, sizes: Qwen3Sizes | None = None) -> Qwen3Weights:
    """Pick the LLM's tensors out of a checkpoint dict keyed as on disk ("llm.model.*", "llm.lm_head.weight")."""
    def get(key: str) -> torch.Tensor:
        if key not in weights:
            raise CheckpointError(f"MiniCPM-o checkpoint lacks {key}")
        return weights[key]

    count = sizes.layers if sizes is not None else len({k.split(".")[3] for k in weights
                                                        if k.startswith("llm.model.layers.")})
    layers = []
    for i in range(count):
        prefix = f"llm.model.layers.{i}."
        layer = {key: get(prefix + key) for key in _LAYER_KEYS}
        layer.update({key: weights[prefix + key] for key in _BIAS_KEYS + tuple(_STACKS) if prefix + key in weights})
        layers.append(layer)
    embed = get("llm.model.embed_tokens.weight")
    tied = sizes.tied if sizes is not None else "llm.lm_head.weight" not in weights
    return Qwen3Weights(embed=embed, layers=layers, norm=get("llm.model.norm.weight"),
                        lm_head=embed if tied else get("llm.lm_head.weight"))


def stack_products(weights: dict, prefix: str, layers: int) -> None:
    """In `weights` (keyed as on disk), each layer's q, k, v and its gate, up weights stacked under QKV and
    GATE_UP, the checkpoint's keys left naming views of them: the fused layers (qwen3.py) read a stack in
    one product. One layer at a time, so the dict's own tensors are freed as they go: the peak grows by
    one layer's products, not the model's. `prefix` is the layers' ("llm.model.layers.").

    On CUDA the freed parts go back to the device layer by layer: torch's allocator gives each
    large tensor a segment of its own, so a layer's freed q, k and v (or gate and up) can never
    hold the next layer's stack: kept, they held about 6 GiB of a Qwen3-8B process's memory."""
    for i in range(layers):
        for stack, keys in _STACKS.items():
            names = [f"{prefix}{i}.{key}" for key in keys]
            whole, views = stacked([weights.pop(name) for name in names])
            weights[f"{prefix}{i}.{stack}"] = whole
            weights.update(zip(names, views, strict=True))
            cuda = (whole if isinstance(whole, torch.Tensor) else whole[0]).is_cuda  # quantized: (q, scales, ...)
        if cuda:
            torch.cuda.empty_cache()


def placed(t, device: torch.device, dtype: torch.dtype):
    """A weight on `device` in `dtype`, contiguous and, on the CPU, 64-byte aligned: MKL rounds a product
    differently when an operand is not, and tensors read from a safetensors file sit at arbitrary offsets;
    torch's own allocations (the reference's) are aligned. Quantized weights (quantized.py) stay as they are."""
    if not isinstance(t, torch.Tensor):
        return t
    t = t.to(device=device, dtype=dtype).contiguous()
    return t.clone() if t.device.type == "cpu" and t.data_ptr() % 64 else t


def rope_inv_freq(sizes: Qwen3Sizes, device) -> tuple[torch.Tensor, float]:
    """fp32 inverse frequencies and the cos/sin scale, as transformers 4.51 modeling_rope_utils.py computes them
    for the rope types a Qwen3 config may name ("default", "linear", "yarn")."""
    dim = sizes.head_dim
    base = sizes.rope_theta
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    scaling = dict(sizes.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / scaling["factor"], 1.0
    if kind != "yarn":
        raise CheckpointError(f"MiniCPM-o: rope_scaling type {kind!r} is not supported")
    factor = scaling["factor"]
    original = scaling.get("original_max_position_embeddings")
    if original is not None:
        factor = sizes.max_positions / original
    else:
        original = sizes.max_positions

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = float(mscale(factor, m) / mscale(factor, m_all)) if m and m_all else mscale(factor)

    def correction(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction(scaling.get("beta_fast") or 32)), 0)
    high = min(math.ceil(correction(scaling.get("beta_slow") or 1)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1).to(device)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(device=device, dtype=torch.float) / dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, attention
