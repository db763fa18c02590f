"""MiniCPM-o 4.5's streaming audio encoder: a unit's samples to the rows the LLM receives for it, as the reference's
DuplexCapability.streaming_prefill makes them (MiniCPM-o-Demo 28b60cf, MiniCPMO45/modeling_minicpmo_unified.py): the
unit's log-mel frames (audio_features), then MiniCPMO.get_audio_embedding_streaming (:1451-1617): the Whisper encoder
`apm` (:5815-6039) over this unit's frames, its convolutions' context frames cut after conv2, full attention over
every earlier unit's keys and values (cached, positions continuing, forgotten when the cache would reach the 1500
positions table); the final LayerNorm's output through the audio projection (:6042), then the average pool of 5: 10
rows a second at the LLM's width. `encode_reference` is prepare's other path (the reference recording: no cache, 1 s
blocks). The cache is declared state (`regions`, on the clock ENCODER_CLOCK, restarted when it is forgotten);
attention reads a `SPAN`-rounded span of it, masked, from a device-tensor position, so a unit's pass (keyed by its
frames, context frames and span) replays as a CUDA graph through a stage runner given here, and runs the same ops
eagerly. Pure torch, any device and dtype (the features fp32 as the reference's; the encoder in `dtype`, its
layers' products in int8 rows where the quantized formats give them so: engine.ops.linear's product).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch.nn import functional as F

from ...errors import CheckpointError
from ...ops.linear import Int8Weight, linear
from ...runtime.stages import Stage
from ...state import FullStore, Region
from .audio_features import FeatureSizes, UnitFeatures, reference_mels

__all__ = ["ENCODER_CLOCK", "ENCODER_KV", "EncoderSizes", "StreamingAudioEncoder"]

SPAN = 500
"""Cache entries a unit's attention reads, in steps of (ten seconds): three spans cover the table."""
ENCODER_KV = "encoder.kv"
"""The cache's region: per position, every layer's key and value heads."""
ENCODER_CLOCK = "encoder.position"
"""Ticks once per position a unit appends; restarts when the cache is forgotten (a conversation's start, a full
table)."""

_LAYER_KEYS = ("self_attn_layer_norm.weight", "self_attn_layer_norm.bias", "self_attn.q_proj.weight",
               "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
               "self_attn.out_proj.weight", "self_attn.out_proj.bias", "final_layer_norm.weight",
               "final_layer_norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
_TOP_KEYS = ("apm.conv1.weight", "apm.conv1.bias", "apm.conv2.weight", "apm.conv2.bias", "apm.embed_positions.weight",
             "apm.layer_norm.weight", "apm.layer_norm.bias", "audio_projection_layer.linear1.weight",
             "audio_projection_layer.linear1.bias", "audio_projection_layer.linear2.weight",
             "audio_projection_layer.linear2.bias")
_ACTS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}  # transformers ACT2FN names, exact forms
_LN_EPS = 1e-5  # nn.LayerNorm's default: MiniCPMWhisperEncoderLayer and WhisperEncoder pass none


@dataclass(frozen=True)
class EncoderSizes:
    """From config.json: audio_config with WhisperConfig()'s defaults (transformers 4.51) when a key or the whole
    dict is absent (configuration_minicpmo.py:244-245), audio_pool_step (default 5, :204) and the LLM width
    hidden_size (Qwen3Config's 4096). The projector reads encoder_ffn_dim // 4 wide (modeling :116)."""
    d_model: int = 384
    layers: int = 4
    heads: int = 6
    ffn: int = 1536
    n_mels: int = 80
    positions: int = 1500
    activation: str = "gelu"
    pool: int = 5
    llm_hidden: int = 4096

    @classmethod
    def from_config(cls, config: dict) -> EncoderSizes:
        audio = config.get("audio_config") or {}
        return cls(d_model=int(audio.get("d_model", 384)), layers=int(audio.get("encoder_layers", 4)),
                   heads=int(audio.get("encoder_attention_heads", 6)), ffn=int(audio.get("encoder_ffn_dim", 1536)),
                   n_mels=int(audio.get("num_mel_bins", 80)),
                   positions=int(audio.get("max_source_positions", 1500)),
                   activation=str(audio.get("activation_function", "gelu")),
                   pool=int(config.get("audio_pool_step", 5)), llm_hidden=int(config.get("hidden_size", 4096)))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def encoder_shapes(sizes: EncoderSizes) -> dict[str, tuple[int, ...]]:
    d, p = sizes.d_model, sizes.ffn // 4
    shapes = {"apm.conv1.weight": (d, sizes.n_mels, 3), "apm.conv1.bias": (d,), "apm.conv2.weight": (d, d, 3),
              "apm.conv2.bias": (d,), "apm.embed_positions.weight": (sizes.positions, d),
              "apm.layer_norm.weight": (d,), "apm.layer_norm.bias": (d,),
              "audio_projection_layer.linear1.weight": (sizes.llm_hidden, p),
              "audio_projection_layer.linear1.bias": (sizes.llm_hidden,),
              "audio_projection_layer.linear2.weight": (sizes.llm_hidden, sizes.llm_hidden),
              "audio_projection_layer.linear2.bias": (sizes.llm_hidden,)}
    ffn = {"fc1.weight": (sizes.ffn, d), "fc1.bias": (sizes.ffn,), "fc2.weight": (d, sizes.ffn)}
    for i in range(sizes.layers):
        for key in _LAYER_KEYS:
            shape = ffn.get(key, (d, d) if key.endswith("proj.weight") else (d,))
            shapes[f"apm.layers.{i}.{key}"] = shape
    return shapes


class StreamingAudioEncoder:
    """`encode(samples)` per unit -> [rows, llm_hidden] in `dtype` (10 rows for a unit; 0 rows when the samples
    do not yet complete a unit, see UnitFeatures.push). `reset()` starts a conversation."""

    def __init__(self, config: dict, weights: dict, device: torch.device | str, dtype: torch.dtype, runner=None):
        self.sizes = sizes = EncoderSizes.from_config(config)
        if sizes.activation not in _ACTS:
            raise CheckpointError(f"MiniCPM-o audio_config: activation {sizes.activation!r} is not supported")
        if sizes.ffn // 4 != sizes.d_model:
            # The reference would build a projector that cannot take the encoder's output.
            raise CheckpointError(f"MiniCPM-o audio_config: encoder_ffn_dim {sizes.ffn} is not 4 x d_model")
        self.device, self.dtype = torch.device(device), dtype
        self.w: dict[str, torch.Tensor | Int8Weight] = {}
        for key, shape in encoder_shapes(sizes).items():
            if key not in weights:
                raise CheckpointError(f"MiniCPM-o checkpoint lacks {key}")
            value = weights[key]
            found = tuple(value.q.shape if isinstance(value, Int8Weight) else value.shape)
            if found != shape:
                raise CheckpointError(f"MiniCPM-o checkpoint: {key} is {found}, expected {shape}")
            self.w[key] = value if isinstance(value, Int8Weight) else value.to(self.device, dtype)
        self.features = UnitFeatures(FeatureSizes.from_config(config), self.device)
        self._slots = torch.arange(sizes.positions, device=self.device)
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)  # a unit's first (a graph's input)
        self.runner = runner
        # keys and values: views [layer, head, position, head_dim] into the store's region; positions beyond
        # `past` are stale or zero, and masked.
        self.place(runner.store if runner is not None else FullStore(self.regions(config, dtype), self.device))
        self._mels: dict[int, torch.Tensor] = {}  # static input frames by count, for replayed passes
        self.chunk_length = float(config.get("audio_chunk_length", 1.0))  # configuration_minicpmo.py:205
        self.past = 0
        self.resets = 0  # times the cache was forgotten mid-conversation (for tests and logs)

    @staticmethod
    def regions(config: dict, dtype: torch.dtype) -> list[Region]:
        """The cache as declared state: the positions table's entries of [layers, key and value, heads, head
        dim], read `SPAN - 1` positions ahead of the clock (zeros, no memory)."""
        s = EncoderSizes.from_config(config)
        return [Region(ENCODER_KV, (s.layers, 2, s.heads, s.head_dim), dtype, ENCODER_CLOCK, s.positions,
                       reads_ahead=SPAN - 1)]

    def place(self, store) -> None:
        """Read and write the cache in `store` (its state moved there by the caller) from now on."""
        s, cache = self.sizes, store[ENCODER_KV]
        if cache.shape != (s.positions, s.layers, 2, s.heads, s.head_dim):
            raise ValueError(f"the store's {ENCODER_KV} {tuple(cache.shape)} is not this encoder's cache")
        self.store = store
        self.keys, self.values = (cache[:, :, kind].permute(1, 2, 0, 3) for kind in (0, 1))

    def _forget(self) -> None:
        """The cache emptied: positions from 0 again, and its clock restarted (nothing held)."""
        self.past = 0
        (self.runner or self.store).restart(ENCODER_CLOCK)

    def span(self, end: int) -> int:
        """Cache entries a unit whose positions end before `end` attends over."""
        return min(self.sizes.positions, -(-end // SPAN) * SPAN)

    def reset(self, *, keep_encoder_cache: bool = False) -> None:
        """A new conversation: sample buffer, mel stream and (unless kept) the encoder cache emptied.
        DuplexCapability.prepare (:4452-4468) leaves the model's audio_past_key_values alone; the demo server clears
        it after each session (DuplexView.cleanup -> reset_session, core/processors/unified.py:1007-1039, and
        modeling :210-212). keep_encoder_cache=True is prepare without that cleanup (the cache carries over)."""
        self.features.reset()
        if not keep_encoder_cache:
            self._forget()
        self.resets = 0

    def encode(self, samples: np.ndarray) -> torch.Tensor:
        unit = self.features.push(samples)
        if unit is None:
            return torch.zeros(0, self.sizes.llm_hidden, device=self.device, dtype=self.dtype)
        return self.encode_mel(unit.mel, unit.prefix_frames, unit.suffix_frames)

    @torch.no_grad()
    def encode_mel(self, mel: torch.Tensor, prefix_frames: int, suffix_frames: int) -> torch.Tensor:
        """get_audio_embedding_streaming on one unit's frames [n_mels, F] (batch 1, use_extra_context=True)."""
        s, frames = self.sizes, mel.shape[-1]
        conv_len, _, n = _unit_frames(frames, prefix_frames, suffix_frames)
        # :1489-1497: the cache is dropped (by its length before this unit) when it would reach the table.
        if self.past > 0 and self.past + conv_len >= s.positions:
            self._forget()
            self.resets += 1
        if self.past + n > s.positions:  # unreachable after the reset rule: conv_len >= n
            raise ValueError(f"audio encoder cache overflow: {self.past} + {n} > {s.positions}")
        self.position.fill_(self.past)
        span = self.span(self.past + n)
        if self.runner is None:
            rows = self._unit_pass(mel.to(self.device), prefix_frames, suffix_frames, span)
        else:
            stage = self.stage(frames, prefix_frames, suffix_frames, span)
            self._mels[frames].copy_(mel)
            rows = self.runner.run(stage).clone()  # the next graph's replay may reuse its output's memory
        self.past += n
        return rows

    def stage(self, frames: int, prefix_frames: int, suffix_frames: int, span: int) -> Stage:
        """A unit's pass over `frames` mel frames with its context frames (read from its static input frames),
        attending over `span` cache entries."""
        if frames not in self._mels:
            self._mels[frames] = torch.zeros(self.features.sizes.n_mels, frames, device=self.device)
        n = _unit_frames(frames, prefix_frames, suffix_frames)[2]
        return Stage(("encoder", frames, prefix_frames, suffix_frames, span),
                     partial(self._unit_pass, self._mels[frames], prefix_frames, suffix_frames, span),
                     ((ENCODER_CLOCK, n),))

    def _unit_pass(self, mel: torch.Tensor, prefix_frames: int, suffix_frames: int, span: int) -> torch.Tensor:
        """The device work of a unit from position self.position on (static shapes)."""
        s, w = self.sizes, self.w
        conv_len, cut_front, n = _unit_frames(mel.shape[-1], prefix_frames, suffix_frames)
        x = self._convolutions(mel)[cut_front:cut_front + n]
        positions = self.position + self._slots[:n]
        h = x + w["apm.embed_positions.weight"].index_select(0, positions)
        # Every key so far, this unit's included (the reference's mask is all zeros: full attention).
        visible = (self._slots[:span] < self.position + n)[None, None, None, :]
        for i in range(s.layers):
            h = self._layer(h, i, visible, positions)
        return self._rows(h, conv_len)

    @torch.no_grad()
    def encode_reference(self, samples: np.ndarray, *, dynamic_floor: bool = True) -> torch.Tensor:
        """The rows DuplexCapability.prepare feeds for its reference audio (:4482-4488): process_audio's mel
        (audio_features.reference_mels) through MiniCPMO.get_audio_embedding (:1619-1685, chunk_length 1.0 from
        config.audio_chunk_length): no cache, positions from 0, each 1 s block attending to itself and every block
        before it. The encoder cache of the units is neither read nor changed. [rows, llm_hidden]."""
        s = self.sizes
        mels = reference_mels(samples, self.features.sizes, self.device, dynamic_floor)
        longest = max(m.shape[-1] for m in mels)
        seq = (longest - 1) // 2 + 1
        block = int(self.chunk_length * 50)  # Whisper's 50 conv frames a second
        j = torch.arange(seq, device=self.device)
        in_block = j[None, :] < (j[:, None] // block + 1) * block  # subsequent_chunk_mask(num_left_chunks=-1)
        if block <= 0:  # chunk_length <= 0: no block mask at all
            in_block = torch.ones_like(in_block)
        out = []
        for mel in mels:  # pad_sequence'd to one batch; each row of it is independent
            frames = mel.shape[-1]
            x = self._convolutions(F.pad(mel, (0, longest - frames)))
            h = x + self.w["apm.embed_positions.weight"][:seq]
            # :1636-1644 compares conv positions with the *mel* frame count, so padding is masked only past it.
            visible = (in_block & (j[None, :] < frames))[None, None]
            for i in range(s.layers):
                h = self._layer(h, i, visible)
            out.append(self._rows(h, (frames - 1) // 2 + 1))
        return torch.cat(out)

    def _convolutions(self, mel: torch.Tensor) -> torch.Tensor:
        """[n_mels, F] fp32 -> [ceil(F / 2), d_model]: conv1, GELU, conv2 (stride 2), GELU, zero-padded ends."""
        w = self.w
        x = mel.to(self.device, self.dtype)[None]
        x = F.gelu(F.conv1d(x, w["apm.conv1.weight"], w["apm.conv1.bias"], padding=1))
        x = F.gelu(F.conv1d(x, w["apm.conv2.weight"], w["apm.conv2.bias"], stride=2, padding=1))
        return x[0].transpose(0, 1)

    def _rows(self, h: torch.Tensor, conv_len: int) -> torch.Tensor:
        """Final LayerNorm (hidden_states[-1]), the projector, the average pool, then as many rows as
        _get_feat_extract_output_lengths (:1327) gives for the frame count."""
        s, w = self.sizes, self.w
        h = F.layer_norm(h, (s.d_model,), w["apm.layer_norm.weight"], w["apm.layer_norm.bias"], _LN_EPS)
        h = F.relu(F.linear(h, w["audio_projection_layer.linear1.weight"], w["audio_projection_layer.linear1.bias"]))
        h = F.linear(h, w["audio_projection_layer.linear2.weight"], w["audio_projection_layer.linear2.bias"])
        pooled = F.avg_pool1d(h.transpose(0, 1)[None], s.pool, stride=s.pool)[0].transpose(0, 1)
        return pooled[:(conv_len - s.pool) // s.pool + 1]

    def _layer(self, h: torch.Tensor, i: int, visible: torch.Tensor,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """MiniCPMWhisperEncoderLayer (:5734-5811) with WhisperSdpaAttention (init_audio_module picks sdpa unless
        the model runs eager). With `positions`, this unit's keys and values go into the cache there and the
        attention reads the whole cache (masked by `visible`); without, it reads just h's own."""
        s, n = self.sizes, h.shape[0]
        p = f"apm.layers.{i}."
        w = self.w
        y = F.layer_norm(h, (s.d_model,), w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"],
                         _LN_EPS)
        q = _product(y, w[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.bias"])
        k = _product(y, w[p + "self_attn.k_proj.weight"]).view(n, s.heads, s.head_dim).transpose(0, 1)
        v = _product(y, w[p + "self_attn.v_proj.weight"], w[p + "self_attn.v_proj.bias"])
        v = v.view(n, s.heads, s.head_dim).transpose(0, 1)  # k_proj above has no bias in Whisper
        if positions is not None:
            span = visible.shape[-1]
            self.keys[i].index_copy_(1, positions, k)
            self.values[i].index_copy_(1, positions, v)
            k, v = self.keys[i, :, :span], self.values[i, :, :span]
        q = q.view(n, s.heads, s.head_dim).transpose(0, 1)
        a = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=visible,
                                           scale=1.0 / math.sqrt(s.head_dim))
        a = a[0].transpose(0, 1).reshape(n, s.d_model)
        h = h + _product(a, w[p + "self_attn.out_proj.weight"], w[p + "self_attn.out_proj.bias"])
        y = F.layer_norm(h, (s.d_model,), w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], _LN_EPS)
        y = _ACTS[s.activation](_product(y, w[p + "fc1.weight"], w[p + "fc1.bias"]))
        return h + _product(y, w[p + "fc2.weight"], w[p + "fc2.bias"])


def _product(x: torch.Tensor, w: torch.Tensor | Int8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A layer's product: torch's on a float weight (the reference's op), engine.ops.linear's on int8 rows."""
    if isinstance(w, torch.Tensor):
        return F.linear(x, w, bias)
    y = linear(x, w)
    return y if bias is None else y + bias


def _unit_frames(frames: int, prefix_frames: int, suffix_frames: int) -> tuple[int, int, int]:
    """(conv2's outputs, those cut at the front, those kept) for a unit of `frames` mel frames: :5899-5911,
    conv2 halves the frames, so ceil(context / 2) outputs go at each end (at the back only if any stay)."""
    conv_len = (frames - 1) // 2 + 1
    cut_front = (prefix_frames + 1) // 2 if prefix_frames > 0 else 0
    cut_back = (suffix_frames + 1) // 2 if suffix_frames > 0 else 0
    kept = conv_len - cut_front
    if 0 < cut_back < kept:
        kept -= cut_back
    return conv_len, cut_front, max(kept, 0)
