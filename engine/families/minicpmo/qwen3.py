"""MiniCPM-o 4.5's language model: the Qwen3 decoder the reference runs as `MiniCPMO.llm` (transformers 4.51's
Qwen3ForCausalLM, MiniCPMO45/configuration_minicpmo.py), with its KV cache declared state (`regions`: one entry a
position, on the clock CLOCK), so a demand-sized store backs the positions held and the span read ahead of them at
addresses that never move, and a full store holds the whole capacity. A pass is exact-shape work on fixed tensors:
its first position is a device tensor (rotary tables looked up and the cache written at it) and attention reads a
`SPAN`-rounded span of the cache, masked past each row; so each (rows, span, last row only) replays as a CUDA graph
through a stage runner given here, and runs the same ops eagerly. Numerics follow the reference op for op in the
model dtype (RMSNorm in fp32, then weight * x.to(dtype); RoPE with cos/sin in the dtype; SDPA, a KV head's query
heads as its rows): CPU fp32 within float noise; on CUDA, a few rows' products through engine.ops.linear's kernels,
within the reference's bf16 noise. Kept on purpose: inv_freq rounded through the model dtype (round_inv_freq) and
4.51's mask clipped to `sliding_window` in every layer. `drop` is the duplex "basic" window's operation (utils.py
drop_tokens_from_cache): forget a span, re-rotate the kept suffix's keys.
"""
from __future__ import annotations

from functools import partial

import torch
from torch.nn import functional as F

from ...ops.attention import hidden_keys
from ...ops.linear import embedding, linear
from ...runtime.stages import Stage
from ...state import FullStore, Region
from . import fused_layers
from .host_tables import ids_for, stays_on_host
from .qwen3_weights import Qwen3Sizes, Qwen3Weights, llm_weights, placed, rope_inv_freq

__all__ = ["CLOCK", "KV", "SPAN", "Qwen3Model"]

SPAN = 512
"""Cache entries attention reads, in steps of: the span of a pass is its last position + 1 rounded up to this
(the capacity at most), so a long context costs what it holds and the spans, hence graphs, stay few."""
KV = "llm.kv"
"""The cache's region: per position, every layer's key and value heads."""
CLOCK = "llm.position"
"""Ticks once per position a pass appends (a window's drop frees positions, the clock does not go back)."""


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
    `runner` (engine.runtime.stages.StageRunner), if given, runs each pass, replayed from its graph where it
    replays, and its store holds the cache (`regions`, declared by whoever built the store); without one
    the model keeps a full store of its own. The context window bounds the capacity (conversation.py)."""

    @staticmethod
    def regions(config: dict, dtype: torch.dtype, capacity: int) -> list[Region]:
        """The cache as declared state: `capacity` positions of [layers, key and value, KV heads, head dim],
        read `SPAN - 1` positions ahead of the clock, as far as a pass's span goes (masked: zeros, no memory)."""
        s = Qwen3Sizes.from_config(config)
        return [Region(KV, (s.layers, 2, s.kv_heads, s.head_dim), dtype, CLOCK, int(capacity),
                       reads_ahead=SPAN - 1)]

    def __init__(self, config: dict, weights: dict | Qwen3Weights, device, dtype: torch.dtype,
                 capacity: int = 8192, round_inv_freq: bool = True, runner=None):
        self.sizes = sizes = Qwen3Sizes.from_config(config)
        self.device, self.dtype, self.capacity = torch.device(device), dtype, int(capacity)
        w = weights if isinstance(weights, Qwen3Weights) else llm_weights(weights, sizes)

        def put(t: torch.Tensor) -> torch.Tensor:
            return placed(t, self.device, dtype)

        tied = w.lm_head is w.embed
        self.embed_weight = w.embed if stays_on_host(w.embed, self.device) and not tied else put(w.embed)
        self.layers = [{k: put(v) for k, v in layer.items()} for layer in w.layers]
        self.norm_weight = put(w.norm)
        self.lm_head_weight = self.embed_weight if tied else put(w.lm_head)
        self.fuses = fused_layers.fuses(self.layers, self.norm_weight, sizes.head_dim)
        inv_freq, self.rope_scale = rope_inv_freq(sizes, self.device)
        # The demo loads the model in fp32 and calls .bfloat16() (core/processors/unified.py:1374), which casts the
        # rotary embedding's inv_freq buffer too; forward then upcasts it (.float()). round_inv_freq keeps that.
        self.inv_freq = inv_freq.to(dtype).float() if round_inv_freq else inv_freq
        self.cos_table, self.sin_table = self._rope(0, self.capacity)
        # The store's rows are zero where first backed: a masked key gets probability 0, and 0 times a stale
        # finite value is 0. keys and values are views [layers, KV heads, capacity, head dim] into its region.
        self.place(runner.store if runner is not None else FullStore(self.regions(config, dtype, capacity),
                                                                      self.device))
        self.key_positions = torch.arange(self.capacity, device=self.device)
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)  # a pass's first (a graph's input)
        self.runner = runner
        self._inputs: dict[int, torch.Tensor] = {}  # static input rows by count, for replayed passes
        self.length = 0

    def place(self, store) -> None:
        """Read and write the cache in `store` (its state moved there by the caller) from now on."""
        s, cache = self.sizes, store[KV]
        if cache.shape != (self.capacity, s.layers, 2, s.kv_heads, s.head_dim):
            raise ValueError(f"the store's {KV} {tuple(cache.shape)} is not this model's cache")
        self.keys, self.values = (cache[:, :, kind].permute(1, 2, 0, 3) for kind in (0, 1))

    def reset(self) -> None:
        self.length = 0

    def truncate(self, n: int) -> None:
        """Keep the first n cached positions (as MiniCPMO._truncate_llm_cache slices its DynamicCache)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}) outside the {self.length} cached positions")
        self.length = n

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding(self.embed_weight, ids_for(self.embed_weight, ids), self.dtype).to(self.device)

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
        hidden = hidden_keys(self.key_positions[:span], positions, self.sizes.attention_window)
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
        fused = self.fuses and fused_layers.fits(count)
        if fused:
            x = x.contiguous()  # the products read rows of unit stride
        else:
            rope = self.cos_table.index_select(0, positions), self.sin_table.index_select(0, positions)
            mask = self._mask(positions, span).repeat(s.heads // s.kv_heads, 1)
        for i, layer in enumerate(self.layers):
            if fused:
                x = fused_layers.layer(x, layer, self.keys[i], self.values[i], self.cos_table, self.sin_table,
                                       self.position, span, s.attention_window, s.heads, s.eps)
                continue
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
        return Stage(("llm", count, span, last_only), partial(self._pass, self._inputs[count], span, last_only),
                     ((CLOCK, count),))

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
