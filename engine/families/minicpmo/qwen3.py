"""MiniCPM-o 4.5's language model: the Qwen3 decoder the reference runs as `MiniCPMO.llm` (transformers 4.51's
Qwen3ForCausalLM, MiniCPMO45/configuration_minicpmo.py), with a KV cache preallocated once (stable addresses). A
pass is exact-shape work on fixed tensors: its first position is a device tensor (rotary tables looked up and the
cache written at it) and attention reads a `SPAN`-rounded span of the cache, masked past each row; so each (rows,
span, last row only) replays as a CUDA graph through a stage runner given here, and runs the same ops eagerly.
Numerics follow the reference op for op in the model dtype (RMSNorm in fp32, then weight * x.to(dtype); RoPE with
cos/sin in the dtype; SDPA, a KV head's query heads as its rows): CPU fp32 within float noise; on CUDA, a few rows'
products through engine.ops.linear's kernels, within the reference's bf16 noise. Kept on purpose: inv_freq rounded
through the model dtype (round_inv_freq) and 4.51's mask clipped to `sliding_window` in every layer. `drop` is the
duplex "basic" window's operation (utils.py drop_tokens_from_cache): forget a span, re-rotate the kept suffix's keys.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch.nn import functional as F

from ...errors import CheckpointError
from ...ops.linear import embedding, linear
from ...runtime.stages import Stage

__all__ = ["Qwen3Model", "Qwen3Sizes", "Qwen3Weights", "llm_weights", "placed"]

SPAN = 512
"""Cache entries attention reads, in steps of: the span of a pass is its last position + 1 rounded up to this
(the capacity at most), so a long context costs what it holds and the spans, hence graphs, stay few."""

_LAYER_KEYS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
               "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
               "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
               "input_layernorm.weight", "post_attention_layernorm.weight")
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
        layer.update({key: weights[prefix + key] for key in _BIAS_KEYS if prefix + key in weights})
        layers.append(layer)
    embed = get("llm.model.embed_tokens.weight")
    tied = sizes.tied if sizes is not None else "llm.lm_head.weight" not in weights
    return Qwen3Weights(embed=embed, layers=layers, norm=get("llm.model.norm.weight"),
                        lm_head=embed if tied else get("llm.lm_head.weight"))


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


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A projection: engine.ops.linear's (a decode row through the fused matrix-vector kernel on CUDA; torch's
    product on the CPU), or with a bias (Qwen3's attention_bias, off in MiniCPM-o) torch's, as the reference."""
    return linear(x, weight) if bias is None else F.linear(x, weight, bias)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def head_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm over the last dim: fp32 statistics, then weight * x.to(dtype) in the input dtype (not the fp32
    product engine.ops.norm.rms_norm takes; the two differ in bf16). Serves the per-head q/k norms too."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class Qwen3Model:
    """The decoder and its cache. forward(embeds [T, H]) appends T positions (position = cache index, as
    utils.py StreamDecoder.feed passes them) and returns (logits [T, V] fp32, final-norm hidden [T, H]).
    `runner` (engine.runtime.stages.StageRunner), if given, runs each pass: replayed from its graph where it
    replays. The cache is this model's own, fixed-size: the context window bounds it (conversation.py)."""

    def __init__(self, config: dict, weights: dict | Qwen3Weights, device, dtype: torch.dtype,
                 capacity: int = 8192, round_inv_freq: bool = True, runner=None):
        self.sizes = sizes = Qwen3Sizes.from_config(config)
        self.device, self.dtype, self.capacity = torch.device(device), dtype, int(capacity)
        w = weights if isinstance(weights, Qwen3Weights) else llm_weights(weights, sizes)

        def put(t: torch.Tensor) -> torch.Tensor:
            return placed(t, self.device, dtype)

        self.embed_weight = put(w.embed)
        self.layers = [{k: put(v) for k, v in layer.items()} for layer in w.layers]
        self.norm_weight = put(w.norm)
        self.lm_head_weight = self.embed_weight if w.lm_head is w.embed else put(w.lm_head)
        inv_freq, self.rope_scale = rope_inv_freq(sizes, self.device)
        # The demo loads the model in fp32 and calls .bfloat16() (core/processors/unified.py:1374), which casts the
        # rotary embedding's inv_freq buffer too; forward then upcasts it (.float()). round_inv_freq keeps that.
        self.inv_freq = inv_freq.to(dtype).float() if round_inv_freq else inv_freq
        self.cos_table, self.sin_table = self._rope(0, self.capacity)
        shape = (sizes.layers, sizes.kv_heads, self.capacity, sizes.head_dim)
        # Zeros, not empty: a masked key gets probability 0, and 0 times a stale finite value is 0.
        self.keys = torch.zeros(shape, device=self.device, dtype=dtype)
        self.values = torch.zeros(shape, device=self.device, dtype=dtype)
        self.key_positions = torch.arange(self.capacity, device=self.device)
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)  # a pass's first (a graph's input)
        self.runner = runner
        self._inputs: dict[int, torch.Tensor] = {}  # static input rows by count, for replayed passes
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def truncate(self, n: int) -> None:
        """Keep the first n cached positions (as MiniCPMO._truncate_llm_cache slices its DynamicCache)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}) outside the {self.length} cached positions")
        self.length = n

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding(self.embed_weight, ids.to(self.device), self.dtype)

    def _rope(self, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Qwen3RotaryEmbedding.forward: fp32 angles, cat(freqs, freqs), cos/sin * attention_scaling, to the dtype.
        positions = torch.arange(first, first + count, device=self.device).float()
        freqs = (self.inv_freq[None, :, None] @ positions[None, None, :]).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.rope_scale).to(self.dtype)[0], (emb.sin() * self.rope_scale).to(self.dtype)[0]

    def span(self, end: int) -> int:
        """Cache entries a pass ending before position `end` attends over."""
        return min(self.capacity, -(-end // SPAN) * SPAN)

    def _mask(self, positions: torch.Tensor, span: int) -> torch.Tensor:
        """Additive [T, span] mask: 0 where a row sees a key, the dtype's minimum past its own position and, as
        4.51's _update_causal_mask clips it, at or beyond `attention_window` behind it."""
        keys, rows = self.key_positions[None, :span], positions[:, None]
        hidden = keys > rows
        if self.sizes.attention_window is not None:
            hidden = hidden | (keys <= rows - self.sizes.attention_window)
        zeros = torch.zeros(hidden.shape, dtype=self.dtype, device=self.device)
        return zeros.masked_fill(hidden, torch.finfo(self.dtype).min)

    def _attention(self, i: int, layer: dict, x: torch.Tensor, rope, positions: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
        s = self.sizes
        count, span = x.shape[0], mask.shape[-1]

        def project(name: str) -> torch.Tensor:
            return _product(x, layer[f"self_attn.{name}_proj.weight"], layer.get(f"self_attn.{name}_proj.bias"))

        q = head_rms_norm(project("q").view(count, s.heads, s.head_dim), layer["self_attn.q_norm.weight"],
                          s.eps).transpose(0, 1)
        k = head_rms_norm(project("k").view(count, s.kv_heads, s.head_dim),
                          layer["self_attn.k_norm.weight"], s.eps).transpose(0, 1)
        v = project("v").view(count, s.kv_heads, s.head_dim).transpose(0, 1)
        cos, sin = rope
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        self.keys[i].index_copy_(1, positions, k)
        self.values[i].index_copy_(1, positions, v)
        # repeat_kv (modeling_qwen3.py) lets query head j read KV head j // rep; here the rep query heads of a KV
        # head are its rows instead, so the cache is read as it lies, not copied rep times.
        rep = s.heads // s.kv_heads
        grouped = q.reshape(s.kv_heads, rep * count, s.head_dim)
        out = F.scaled_dot_product_attention(grouped[None], self.keys[i, :, :span][None],
                                             self.values[i, :, :span][None], attn_mask=mask[None, None],
                                             scale=s.head_dim ** -0.5)
        out = out[0].reshape(s.heads, count, s.head_dim).transpose(0, 1).reshape(count, s.heads * s.head_dim)
        return _product(out, layer["self_attn.o_proj.weight"], layer.get("self_attn.o_proj.bias"))

    def _pass(self, x: torch.Tensor, span: int, last_only: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The device work of one pass over rows x [T, H] at positions self.position.. (static shapes)."""
        s, count = self.sizes, x.shape[0]
        positions = self.position + self.key_positions[:count]
        rope = self.cos_table.index_select(0, positions), self.sin_table.index_select(0, positions)
        mask = self._mask(positions, span).repeat(s.heads // s.kv_heads, 1)
        for i, layer in enumerate(self.layers):
            h = head_rms_norm(x, layer["input_layernorm.weight"], s.eps)
            x = x + self._attention(i, layer, h, rope, positions, mask)
            h = head_rms_norm(x, layer["post_attention_layernorm.weight"], s.eps)
            gate = F.silu(linear(h, layer["mlp.gate_proj.weight"]))
            x = x + linear(gate * linear(h, layer["mlp.up_proj.weight"]), layer["mlp.down_proj.weight"])
        hidden = head_rms_norm(x, self.norm_weight, s.eps)
        rows = hidden[-1:] if last_only else hidden
        return linear(rows, self.lm_head_weight).float(), hidden

    def stage(self, count: int, span: int, last_only: bool = False) -> Stage:
        """The pass over `count` rows (read from its static input rows) attending over `span` entries."""
        if count not in self._inputs:
            self._inputs[count] = torch.zeros(count, self.sizes.hidden, dtype=self.dtype, device=self.device)
        return Stage(("llm", count, span, last_only), partial(self._pass, self._inputs[count], span, last_only))

    def forward(self, embeds: torch.Tensor, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Append embeds [T, H]; return (logits [T, V] fp32 — [1, V] for the last row when last_only —, hidden
        [T, H] after the final norm, in the model dtype). The lm_head runs in the model dtype, as the reference's
        `self.m.lm_head(out.hidden_states[-1])` does, and only then widens to fp32. The results are the caller's
        (copies, where a graph's outputs would be rewritten by the next replay)."""
        count = embeds.shape[0]
        if count == 0:
            raise ValueError("Qwen3Model.forward needs at least one row")
        if self.length + count > self.capacity:
            raise ValueError(f"Qwen3 cache full: {self.length} + {count} > capacity {self.capacity}")
        self.position.fill_(self.length)
        span = self.span(self.length + count)
        x = embeds.to(device=self.device, dtype=self.dtype)
        if self.runner is None:
            logits, hidden = self._pass(x, span, last_only)
        else:
            stage = self.stage(count, span, last_only)
            self._inputs[count].copy_(x)
            logits, hidden = (t.clone() for t in self.runner.run(stage))
        self.length += count
        return logits, hidden

    def drop(self, start: int, count: int) -> None:
        """Forget cached positions [start, start + count) and move the rest down by count, re-rotating the moved
        keys from their old positions to their new ones as utils.py realign_rotary_suffix does: a fresh fp32
        inv_freq from rope_theta alone (no rope_scaling, no dtype rounding, unlike the forward pass), cos/sin cast
        to the cache dtype, inverse then forward rotation in that dtype. The duplex "basic" window calls it with
        start = the system prompt's length and count = the oldest units' total (StreamDecoder._drop_unit)."""
        if count <= 0:
            return
        if not 0 <= start <= self.length - count:
            raise ValueError(f"drop({start}, {count}) outside the {self.length} cached positions")
        end, suffix = start + count, self.length - start - count
        if suffix > 0:
            cos_old, sin_old = self._realign_tables(end, suffix)
            cos_new, sin_new = self._realign_tables(start, suffix)
            keys = self.keys[:, :, end:self.length]
            base = cos_old * keys - sin_old * rotate_half(keys)
            self.keys[:, :, start:start + suffix] = cos_new * base + sin_new * rotate_half(base)
            self.values[:, :, start:start + suffix] = self.values[:, :, end:self.length].clone()
        self.length -= count

    def _realign_tables(self, first: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        # utils.py get_rotary_cos_sin: its own inv_freq, einsum angles, cos/sin then cat, cast to the cache dtype.
        dim = self.sizes.head_dim
        exponent = torch.arange(0, dim, 2, device=self.device, dtype=torch.float32) / dim
        inv_freq = 1.0 / (self.sizes.rope_theta ** exponent)
        positions = torch.arange(first, first + count, device=self.device, dtype=torch.long).float()
        angles = torch.einsum("i,j->ij", positions, inv_freq)
        cos, sin = torch.cos(angles), torch.sin(angles)
        return torch.cat([cos, cos], dim=-1).to(self.dtype), torch.cat([sin, sin], dim=-1).to(self.dtype)
