"""The streaming transformer of Mimi (encoder/decoder) and the Moshi LM (temporal, depformer).

Parameter names mirror the official checkpoints relative to the transformer
(`layers.{i}.self_attn.in_proj_weight`, `layers.{i}.gating.linear_in.weight`, ...), so loading
needs no renaming. Streaming state (a K and a V ring per layer, and a position counter) is
declared through `regions()` and lives in the caller's `Store`. Ring semantics follow the
reference runtime exactly: a ring of `context` entries; a step's T new entries are written first,
then each query attends to the keys whose position p satisfies 0 <= pos_q - p < context. After a
wrap the first query of a multi-entry step thus sees one key fewer than a whole-signal pass would:
the reference's behaviour, which we keep. engine.ops chooses torch or Triton: a streaming step
over a few positions on CUDA runs each layer as fused products (`engine.ops.fused.fuses`, decided
once per step and carried by StepPositions.fused), any other step as the torch formulas.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from .config.transformer_config import TransformerConfig
from .ops import fused
from .ops.attention import ring_attention
from .ops.linear import matmul
from .ops.norm import Norm, rms_norm
from .ops.rope import apply_rope, coefficient, tables
from .state import Region, Store
from .weights.int8 import Int8Weight, weight_of


class RMSNormF32(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-8):
        super().__init__()
        self.eps = eps
        self.alpha = nn.Parameter(torch.ones(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.alpha, self.eps)


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class GatedFFN(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.linear_in = nn.Linear(dim, 2 * hidden, bias=False)
        self.linear_out = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, adapter: Adapter | None = None, layer: int = 0) -> torch.Tensor:
        h = _adapted(matmul(x, weight_of(self.linear_in)), x, adapter, "ffn_in", layer)
        h = h.view(*h.shape[:-1], 2, -1)
        gated = F.silu(h[..., 0, :]) * h[..., 1, :]
        return _adapted(matmul(gated, weight_of(self.linear_out)), gated, adapter, "ffn_out", layer)


class _Weight(nn.Module):
    """Holds a bare `weight` so the key reads `out_proj.weight` as on disk."""
    linear_weights = ("weight",)  # what engine.weights.int8.int8_layout quantizes

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape))


class StepPositions(NamedTuple):
    """What every layer of one step needs about positions, computed once per step (not per
    layer: at batch 1 each small kernel saved counts), and how the step computes."""
    first: torch.Tensor  # int64 [1]: position of the step's first entry (device)
    each: torch.Tensor | None  # int64 [T]: positions of the step's entries (None when fused)
    rope: tuple[torch.Tensor, torch.Tensor] | None  # cos, sin [1, 1, T, D/2] in fp32
    slots: torch.Tensor | None  # int64 [T]: ring slots the entries go to (streaming only)
    fused: bool = False  # fused layers (engine.ops.fused), which need `first` only

    @staticmethod
    def at(first: torch.Tensor, T: int, cfg: TransformerConfig, ring: int | None,
           fused: bool = False) -> StepPositions:
        if fused:
            return StepPositions(first, None, None, None, True)
        each = first + torch.arange(T, device=first.device)
        rope = tables(each, cfg.head_dim, cfg.max_period) if cfg.rope else None
        return StepPositions(first, each, rope, None if ring is None else each % ring)


def attend(q, k, v, pos_q, pos_k, context: int | None) -> torch.Tensor:
    """Whole-signal causal attention; keys outside the window or empty (pos -1) are masked."""
    delta = pos_q.view(-1, 1) - pos_k.view(1, -1)
    allowed = (pos_k.view(1, -1) >= 0) & (delta >= 0)
    if context is not None:
        allowed = allowed & (delta < context)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


class Adapter(Protocol):
    """Low-rank corrections to the projections of the last `rows` positions of a step (a
    DiffuPlex predictor's LoRA, which acts at masked future positions only)."""
    rows: int

    def adapts(self, target: str) -> bool:
        """Whether projection `target` is corrected at all."""

    def add_delta(self, target: str, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """x [rows, in] of projection `target` ("qkv", "out", "ffn_in", "ffn_out") of layer
        `layer`: adds the correction to its output y [rows, out] in place."""

    def lora(self, target: str, layer: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(A [rank, in], B [out, rank], scale) of projection `target` of layer `layer`, which
        add_delta adds as (x @ A.T) @ (scale * B).T: what the fused layers take."""


def _lora(adapter: Adapter | None, target: str, layer: int) -> fused.Lora | None:
    """The adapter's correction of one projection as the fused products take it."""
    if adapter is None or not adapter.adapts(target):
        return None
    return fused.Lora(*adapter.lora(target, layer), adapter.rows)


def _adapted(y: torch.Tensor, x: torch.Tensor, adapter: Adapter | None, target: str, layer: int) -> torch.Tensor:
    """y = a projection of x [1, T, in]; the adapter's rows corrected. Rows before them are untouched."""
    if adapter is not None and adapter.adapts(target):
        rows = adapter.rows
        adapter.add_delta(target, layer, x[0, -rows:], y[0, -rows:])
    return y


class Attention(nn.Module):
    linear_weights = ("in_proj_weight",)  # what engine.weights.int8.int8_layout quantizes (and out_proj's)

    def __init__(self, cfg: TransformerConfig, kv_region: str, index: int):
        super().__init__()
        self.cfg, self.kv_region, self.index = cfg, kv_region, index
        steps = max(cfg.weights_per_step, 1)
        self.in_proj_weight = nn.Parameter(torch.empty(steps * 3 * cfg.d_model, cfg.d_model))
        self.out_proj = _Weight(steps * cfg.d_model, cfg.d_model)

    def weights(self, step: int) -> tuple[torch.Tensor | Int8Weight, torch.Tensor | Int8Weight]:
        """The (in, out) projection weights of step `step` (per-step weights) or the only ones."""
        d = self.cfg.d_model

        def of_step(w, rows: int):
            if isinstance(w, torch.Tensor):
                return w.view(-1, rows, d)[step]
            return w.of_step(step, rows)

        return of_step(weight_of(self, "in_proj_weight"), 3 * d), of_step(weight_of(self.out_proj), d)

    def forward(self, x: torch.Tensor, pos: StepPositions, store: Store | None,
                step: int, adapter: Adapter | None = None) -> torch.Tensor:
        c = self.cfg
        B, T, _ = x.shape
        w_in, w_out = self.weights(step)
        qkv = _adapted(matmul(x, w_in), x, adapter, "qkv", self.index)
        qkv = qkv.view(B, T, 3, c.num_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # [B, H, T, D]
        if pos.rope is not None:
            q, k = apply_rope(q, pos.rope), apply_rope(k, pos.rope)
        if store is None:
            out = attend(q, k, v, pos.each, pos.each, c.context)
        else:
            kv = store[self.kv_region][:, self.index]  # [ring, 2, H, D]
            kv.index_copy_(0, pos.slots, torch.stack([k[0], v[0]]).permute(2, 0, 1, 3))
            # Reads only live entries, with their count taken from `pos` on the device: the
            # same code eager and graph-replayed, over plain or demand-sized placement.
            out = ring_attention(q, kv, pos.first, T, c.context)
        out = out.transpose(1, 2).reshape(B, T, c.d_model)
        return _adapted(matmul(out, w_out), out, adapter, "out", self.index)


class Layer(nn.Module):
    def __init__(self, cfg: TransformerConfig, kv_region: str, index: int):
        super().__init__()
        self.cfg = cfg
        norm = (lambda: nn.LayerNorm(cfg.d_model, eps=1e-5)) if cfg.norm == "layer_norm" \
            else (lambda: RMSNormF32(cfg.d_model))
        self.norm1, self.norm2 = norm(), norm()
        self.self_attn = Attention(cfg, kv_region, index)
        if cfg.gating == "none":
            self.linear1 = nn.Linear(cfg.d_model, cfg.dim_feedforward, bias=False)
            self.linear2 = nn.Linear(cfg.dim_feedforward, cfg.d_model, bias=False)
        elif cfg.weights_per_step:
            self.gating = nn.ModuleList(GatedFFN(cfg.d_model, cfg.gated_hidden)
                                        for _ in range(cfg.weights_per_step))
        else:
            self.gating = GatedFFN(cfg.d_model, cfg.gated_hidden)
        if cfg.layer_scale is not None:
            self.layer_scale_1 = LayerScale(cfg.d_model, cfg.layer_scale)
            self.layer_scale_2 = LayerScale(cfg.d_model, cfg.layer_scale)

    def _scaled(self, which: int, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.layer_scale is None:
            return x
        return getattr(self, f"layer_scale_{which}")(x)

    def _ffn(self, x: torch.Tensor, step: int, adapter: Adapter | None) -> torch.Tensor:
        if self.cfg.gating == "none":
            return self.linear2(F.gelu(self.linear1(x)))
        if self.cfg.weights_per_step:
            return self.gating[step](x)
        return self.gating(x, adapter, self.self_attn.index)

    def forward(self, x: torch.Tensor, pos: StepPositions, store: Store | None, step: int,
                adapter: Adapter | None = None) -> torch.Tensor:
        """x [1, T, d] -> [1, T, d]: as fused products when the step is (`pos.fused`), otherwise
        as the torch formulas; the two compute the same layer."""
        if pos.fused:
            return self._fused(x, pos.first, store, step, adapter)
        x = x + self._scaled(1, self.self_attn(self.norm1(x), pos, store, step, adapter))
        return x + self._scaled(2, self._ffn(self.norm2(x), step, adapter))

    def _fused(self, x: torch.Tensor, first: torch.Tensor, store: Store, step: int,
               adapter: Adapter | None) -> torch.Tensor:
        """The layer (streaming) in four products with the elementwise work and the adapter's
        corrections fused into them (the same projections `forward` corrects), plus the
        attention, over x's rows [T, d]."""
        c, attn, i = self.cfg, self.self_attn, self.self_attn.index
        shape, x = x.shape, x.reshape(x.shape[1], -1)
        if x.stride(1) != 1:  # Mimi's [1, C, T] latents arrive transposed
            x = x.contiguous()
        w_in, w_out = attn.weights(step)
        coef = coefficient(c.head_dim, c.max_period) if c.rope else None
        kv = store[attn.kv_region][:, attn.index]
        q = fused.qkv_into_ring(x, w_in, _norm_spec(self.norm1), first, kv, c.num_heads, coef,
                                _lora(adapter, "qkv", i))
        a = ring_attention(q, kv, first, x.shape[0], c.context)  # [1, H, T, D] over [T, H, D]
        x = fused.linear(a[0].transpose(0, 1).reshape(x.shape), w_out, residual=x, scale=self._scale(1),
                         lora=_lora(adapter, "out", i))
        if c.gating == "none":
            h = fused.linear(x, self.linear1.weight, norm=_norm_spec(self.norm2))
            x = fused.linear(h, self.linear2.weight, act="gelu", residual=x, scale=self._scale(2))
        else:
            ffn = self.gating[step] if c.weights_per_step else self.gating
            ffn_adapter = None if c.weights_per_step else adapter  # as _ffn: per-step FFNs are not corrected
            x = fused.gated_ffn(x, weight_of(ffn.linear_in), weight_of(ffn.linear_out), norm=_norm_spec(self.norm2),
                                residual=x, scale=self._scale(2), lora_in=_lora(ffn_adapter, "ffn_in", i),
                                lora_out=_lora(ffn_adapter, "ffn_out", i))
        return x.view(shape)

    def _scale(self, which: int) -> torch.Tensor | None:
        return None if self.cfg.layer_scale is None else getattr(self, f"layer_scale_{which}").scale


def _norm_spec(norm: nn.Module) -> Norm:
    """The layer's norm as the fused products take it."""
    if isinstance(norm, RMSNormF32):
        return Norm("rms", norm.alpha.view(-1), None, norm.eps)
    return Norm("layer", norm.weight, norm.bias, norm.eps)


class StreamingTransformer(nn.Module):
    def __init__(self, cfg: TransformerConfig, name: str):
        super().__init__()
        self.cfg, self.name = cfg, name
        self.pos_region, self.kv_region = f"{name}.pos", f"{name}.kv"
        self.layers = nn.ModuleList(Layer(cfg, self.kv_region, i) for i in range(cfg.num_layers))

    def regions(self, wake: int = 1) -> list[Region]:
        """A position counter and one KV ring whose entry holds every layer's K and V for one
        step: a step's state is then contiguous, so demand-sized backing grows in fine steps.
        `wake`: the most positions one step covers. A step writes its entries before it
        attends, so the ring keeps wake - 1 entries beyond the attention window for the first
        queries still to see the whole window, as single steps would."""
        c = self.cfg
        dtype = next(self.layers[0].norm1.parameters()).dtype  # the activations' (weights may be int8)
        entry = (c.num_layers, 2, c.num_heads, c.head_dim)
        kv = (Region(self.kv_region, (c.ring, *entry), dtype) if c.clock == "fixed"
              else Region(self.kv_region, entry, dtype, c.clock, c.ring + wake - 1, ahead=wake - 1))
        return [Region(self.pos_region, (1,), torch.int64), kv]

    def forward(self, x: torch.Tensor, store: Store | None = None, step: int = 0,
                adapter: Adapter | None = None, keep: int | None = None) -> torch.Tensor:
        """x [1, T, d]. `step` picks the weight set when weights_per_step > 0 (T must be 1).
        Streaming, the first `keep` positions (default all) become history; the KV of the rest
        is written past the position counter, where later steps overwrite it unread."""
        if self.cfg.weights_per_step and x.shape[1] != 1:
            raise ValueError("per-step weights take one step at a time")
        if store is None:
            first, ring = torch.zeros(1, dtype=torch.long, device=x.device), None
        else:
            first, ring = store[self.pos_region], store[self.kv_region].shape[0]
        # The one choice of the step's computation (engine.ops.fused): every layer follows it.
        fuses = fused.fuses(x, self.cfg.head_dim, streaming=store is not None)
        pos = StepPositions.at(first, x.shape[1], self.cfg, ring, fuses)
        for layer in self.layers:
            x = layer(x, pos, store, step, adapter)
        if store is not None:
            first.add_(x.shape[1] if keep is None else keep)
        return x
