"""MiniCPM-o 4.5's speech-token generator (the reference's MiniCPMTTS as DuplexCapability drives it).

Per speaking unit the LLM's text ids and final hidden states become condition rows (emb_text(id) + L2-normalised
projector(hidden), then the audio-BOS row); a small Llama prefills them on top of the turn's KV cache and samples 25
speech tokens (26 draws, the last discarded) from the caller's generator in the reference's order, so seeded runs
match draw for draw. The cache carries across a turn's units: declared state (`regions`, one entry a position on the
clock TTS_CLOCK, which restarts with each turn), backed in a demand-sized store for the turn's positions and the
span read ahead of them. Pure torch. A draw is exact-shape work on fixed tensors: the position, the draw's index
(the repetition penalty's window) and the EOS mask are device tensors, attention reads a `SPAN`-rounded span of the
cache, masked; so each (condition rows, span) and each step's span replays as a CUDA graph through a stage runner
given here, and runs the same ops eagerly (the CPU, or replay off): the same output.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch.nn import functional as F

from ...ops.linear import embedding, linear
from ...runtime.stages import Stage
from ...state import FullStore, Region
from . import fused_layers
from .host_tables import ids_for, stays_on_host
from .qwen3 import head_rms_norm, rotate_half  # LlamaRMSNorm and Llama's rotate_half are Qwen3's
from .qwen3_weights import placed

SPAN = 512
"""Cache entries a draw's attention reads, in steps of (see Qwen3's SPAN)."""
_ACTS = {"silu": F.silu, "relu": F.relu, "gelu": F.gelu}
TTS_KV = "tts.kv"
"""The cache's region: per position, every layer's key and value heads."""
TTS_CLOCK = "tts.position"
"""Ticks once per position a draw appends; restarts when a turn ends (the cache is emptied then)."""


@dataclass(frozen=True)
class SpeechTokensConfig:
    """Sizes from config.json's tts_config; defaults are MiniCPMTTSConfig's (configuration_minicpmo.py:66-117).
    The backbone's LlamaConfig gets no eps/theta (modeling_minicpmo_unified.py:6230-6238): Llama's defaults.
    Sampling values are DuplexCapability's defaults (modeling_minicpmo_unified.py:4286-4288, 5191, 6986)."""
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    num_hidden_layers: int = 20
    max_position_embeddings: int = 4096
    num_audio_tokens: int = 4097
    num_text_tokens: int = 21178
    num_vq: int = 1
    audio_bos_token_id: int = 21132
    projector_type: str = "mlp"
    hidden_act: str = "silu"
    llm_dim: int = 2560
    rms_norm_eps: float = 1e-6  # LlamaConfig default
    rope_theta: float = 10000.0  # LlamaConfig default
    temperature: float = 0.8
    repetition_penalty: float = 1.05
    penalty_window: int = 16  # gen_logits' past_window
    steps_per_unit: int = 26  # max_token_per_chunk = 25 + 1: 26 draws, 25 tokens kept

    @classmethod
    def from_config(cls, config: dict) -> SpeechTokensConfig:
        tts = config.get("tts_config") or {}
        names = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                 "num_hidden_layers", "max_position_embeddings", "num_audio_tokens", "num_text_tokens", "num_vq",
                 "audio_bos_token_id", "projector_type", "hidden_act", "llm_dim")
        found = {name: tts[name] for name in names if name in tts}
        if tts.get("backbone_model", "llama") != "llama":
            raise ValueError(f"unsupported TTS backbone {tts['backbone_model']!r} (the reference supports llama)")
        return cls(**found)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def eos(self) -> int:
        """The audio EOS: the last audio token (DuplexCapability's tts_eos_token, line 4369)."""
        return self.num_audio_tokens - 1


def tts_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's "tts.*" tensors under their names without the prefix, each head_code's weight norm
    resolved once into a plain `head_code.{i}.weight` (the reference caches it the same way, P.cached()).
    Takes both weight-norm spellings: parametrizations.weight.original0/1 and the older weight_g/weight_v."""
    out = {name[len("tts."):]: t for name, t in weights.items() if name.startswith("tts.")}
    for name in [n for n in out if n.startswith("head_code.")]:
        for g_suffix, v_suffix in ((".parametrizations.weight.original0", ".parametrizations.weight.original1"),
                                   (".weight_g", ".weight_v")):
            if name.endswith(g_suffix):
                stem = name[: -len(g_suffix)]
                g, v = out.pop(name), out.pop(stem + v_suffix)
                # The parametrization's own formula (torch.nn.utils.parametrizations._WeightNorm), in v's dtype.
                out[stem + ".weight"] = torch._weight_norm(v, g, 0)
    return out


def _under(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {name[len(prefix):]: t for name, t in weights.items() if name.startswith(prefix)}


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """torch.multinomial(probs, 1, generator=generator) for a [1, V] row, the same draw from the same
    random numbers (its one-sample path: argmax of p / q, q ~ Exp(1) drawn as empty_like(p).exponential_),
    without its checks of the row, which read the device on the host (no CUDA graph could hold them)."""
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return torch.argmax(probs / q, dim=-1, keepdim=True)


class SpeechTokenGenerator:
    """One session's TTS. reset() at a session start; generate() empties the cache itself at a turn end.

    condition(text_ids, llm_hidden) -> rows [n + 1, hidden]; generate(rows, generator, end_of_turn=...) ->
    the unit's speech tokens (25, or fewer only when the audio EOS may be drawn: at a turn's first TTS unit
    or when end_of_turn). `length` is the positions cached in the current turn (0: a turn's first unit)."""

    def __init__(self, config: dict, weights: dict[str, torch.Tensor], device: torch.device | str,
                 dtype: torch.dtype, capacity: int | None = None, round_inv_freq: bool = True, runner=None):
        self.cfg = c = SpeechTokensConfig.from_config(config)
        if c.num_vq != 1:
            raise ValueError(f"num_vq {c.num_vq}: the duplex path embeds only codebook 0 (generate_chunk, line 6748)")
        self.device, self.dtype = torch.device(device), dtype
        w = {name: t if name == "emb_text.weight" and stays_on_host(t, self.device) else placed(t, self.device, dtype)
             for name, t in tts_weights(weights).items()}
        self.emb_text, self.emb_code, self.head = w["emb_text.weight"], w["emb_code.0.weight"], w["head_code.0.weight"]
        self.final_norm = w["model.norm.weight"]
        self.projector = _under(w, "projector_semantic.")
        self.layers = [_under(w, f"model.layers.{i}.") for i in range(c.num_hidden_layers)]
        self.fuses = fused_layers.fuses(self.layers, self.final_norm, c.head_dim)
        self.capacity = capacity or c.max_position_embeddings
        # The store's rows are zero where first backed: masked keys get probability 0, and 0 * a stale finite
        # value is 0. keys and values are views [layers, KV heads, capacity, head dim] into its region.
        self.runner = runner
        self.store = runner.store if runner is not None else FullStore(self.regions(config, dtype, self.capacity),
                                                                       self.device)
        self.place(self.store)
        self.cos, self.sin = self._rope_tables(round_inv_freq)
        self.key_positions = torch.arange(self.capacity, device=self.device)
        self.temperature = torch.tensor([[c.temperature]], device=self.device)  # as DuplexCapability's, fp32
        self.drawn = torch.zeros(c.steps_per_unit, dtype=torch.long, device=self.device)
        # The device side of a unit's draws (inputs of every draw's graph): the next row's position, the
        # draw's index, 0 or -inf added to the EOS logit, and the row a step feeds (the last draw embedded).
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)
        self.step = torch.zeros(1, dtype=torch.long, device=self.device)
        self.eos_bias = torch.zeros(1, device=self.device)
        self.step_input = torch.zeros(1, c.hidden_size, dtype=dtype, device=self.device)
        self._inputs: dict[int, torch.Tensor] = {}  # static condition rows by count, for replayed draws
        self.generator: torch.Generator | None = None  # what the draws take (generate sets it)
        self.length = 0

    @staticmethod
    def regions(config: dict, dtype: torch.dtype, capacity: int | None = None) -> list[Region]:
        """The cache as declared state: `capacity` positions (default max_position_embeddings) of [layers, key
        and value, KV heads, head dim], read `SPAN - 1` positions ahead of the clock (zeros, no memory)."""
        c = SpeechTokensConfig.from_config(config)
        return [Region(TTS_KV, (c.num_hidden_layers, 2, c.num_key_value_heads, c.head_dim), dtype, TTS_CLOCK,
                       int(capacity or c.max_position_embeddings), reads_ahead=SPAN - 1)]

    def place(self, store) -> None:
        """Read and write the cache in `store` (its state moved there by the caller) from now on."""
        c, cache = self.cfg, store[TTS_KV]
        if cache.shape != (self.capacity, c.num_hidden_layers, 2, c.num_key_value_heads, c.head_dim):
            raise ValueError(f"the store's {TTS_KV} {tuple(cache.shape)} is not this TTS's cache")
        self.store = store
        self.keys, self.values = (cache[:, :, kind].permute(1, 2, 0, 3) for kind in (0, 1))

    def _rope_tables(self, round_inv_freq: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [capacity, head_dim] fp32 for every position, as LlamaRotaryEmbedding computes them.
        The demo loads in fp32 then calls .bfloat16() (core/processors/unified.py:1374), which rounds the
        inv_freq buffer too (forward upcasts it): round_inv_freq keeps that (a no-op in fp32)."""
        c = self.cfg
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.int64, device=self.device)
                                           .float() / c.head_dim))
        if round_inv_freq:
            inv_freq = inv_freq.to(self.dtype).float()
        freqs = inv_freq[:, None] @ torch.arange(self.capacity, device=self.device).float()[None, :]
        emb = torch.cat((freqs.T, freqs.T), dim=-1)
        return emb.cos(), emb.sin()

    def reset(self) -> None:
        """A new turn: positions restart at 0, and so does the cache's clock (its entries back to zero)."""
        self.length = 0
        (self.runner or self.store).restart(TTS_CLOCK)

    def condition(self, text_ids: Sequence[int] | torch.Tensor, llm_hidden: torch.Tensor) -> torch.Tensor:
        """Rows [n + 1, hidden]: emb_text(id) + normalize(projector_semantic(hidden)) per text token, then
        emb_text(audio BOS) (_convert_results_to_tts_input, line 5411). llm_hidden [n, llm_dim]: the LLM's
        final-norm hidden state after each token was fed. No tokens: the audio-BOS row alone."""
        bos = self._rows([self.cfg.audio_bos_token_id])
        if len(text_ids) == 0:
            return bos
        projected = F.normalize(self._project(llm_hidden.to(self.device, self.dtype)), p=2, dim=-1)
        return torch.cat([self._rows(text_ids) + projected, bos])

    def _rows(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Text-table rows, looked up where it is: the reference's op on floats, engine.ops.linear's on int8."""
        table, ids = self.emb_text, ids_for(self.emb_text, ids)
        rows = F.embedding(ids, table) if isinstance(table, torch.Tensor) else embedding(table, ids, self.dtype)
        return rows.to(self.device)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """projector_semantic: MiniCPMTTS.create_projector's three kinds (line 6271)."""
        p, kind = self.projector, self.cfg.projector_type
        if kind == "mlp":  # MultiModalProjector
            return F.linear(F.relu(F.linear(x, p["linear1.weight"], p["linear1.bias"])),
                            p["linear2.weight"], p["linear2.bias"])
        if kind == "minicpm":  # MiniCPMMLP
            act = _ACTS[self.cfg.hidden_act]
            gate = act(F.linear(x, p["gate_proj.weight"], p["gate_proj.bias"]))
            return F.linear(gate * F.linear(x, p["up_proj.weight"], p["up_proj.bias"]),
                            p["down_proj.weight"], p["down_proj.bias"])
        if kind == "default":
            return F.linear(x, p["weight"])
        raise ValueError(f"unsupported projector_type {kind!r}")

    def span(self, end: int) -> int:
        """Cache entries a draw whose rows end before position `end` attends over."""
        return min(self.capacity, -(-end // SPAN) * SPAN)

    def stage(self, rows: int | None, span: int) -> Stage:
        """A unit's first draw, over `rows` condition rows (from their static input), or (rows None) a
        step's, over the last draw's embedding; attending over `span` entries."""
        if rows is None:
            return Stage(("tts step", span), partial(self._draw, self.step_input, span), ((TTS_CLOCK, 1),))
        if rows not in self._inputs:
            self._inputs[rows] = torch.zeros(rows, self.cfg.hidden_size, dtype=self.dtype, device=self.device)
        return Stage(("tts condition", rows, span), partial(self._draw, self._inputs[rows], span),
                     ((TTS_CLOCK, rows),))

    @torch.no_grad()
    def generate(self, condition: torch.Tensor, generator: torch.Generator, *, end_of_turn: bool = False,
                 trace: list[torch.Tensor] | None = None) -> list[int]:
        """One unit: prefill condition [L, hidden] at the turn's next positions, then draw steps_per_unit
        times (MiniCPMTTS.generate_chunk, line 6692, with streaming_generate's arguments, lines 5191-5215).
        The EOS may be drawn only at a turn's first unit or when end_of_turn (else min_new_tokens = 26 masks
        it); drawing it stops the unit, the EOS dropped. Only then does a step wait on the device (to know
        whether to stop: a draw the reference doesn't make would shift the generator for what follows).
        end_of_turn empties the cache afterwards. trace, if given, receives each step's head logits [V]."""
        c = self.cfg
        start, rows = self.length, condition.shape[0]
        if start + rows + c.steps_per_unit - 1 > self.capacity:
            raise RuntimeError(f"TTS turn longer than the cache's {self.capacity} positions "
                               f"(at {start}, unit needs {rows + c.steps_per_unit - 1})")
        if self.runner is not None and self.runner.replay and generator is not self.runner.generator:
            raise ValueError("a replayed TTS draws from its stage runner's generator")
        min_new = 0 if (start == 0 or end_of_turn) else c.steps_per_unit
        self.position.fill_(start)
        self.step.zero_()
        self.eos_bias.fill_(-math.inf if min_new else 0.0)
        self.generator = generator
        condition, kept = condition.to(self.device, self.dtype), c.steps_per_unit - 1
        for t in range(c.steps_per_unit):
            end = start + rows + t  # the draw's rows end before this position
            if self.runner is None:
                logits = self._draw(condition if t == 0 else self.step_input, self.span(end))
            else:
                stage = self.stage(rows if t == 0 else None, self.span(end))
                if t == 0:
                    self._inputs[rows].copy_(condition)
                logits = self.runner.run(stage)
            if trace is not None:
                trace.append(logits[0].clone())
            if t >= min_new and bool(self.drawn[t] == c.eos):
                kept = t
                break
        self.length = start + rows + kept  # the condition and every kept token are cached (line 5228)
        tokens = self.drawn[:kept].tolist()
        if end_of_turn:  # lines 5221-5224
            self.reset()
        return tokens

    def _draw(self, x: torch.Tensor, span: int) -> torch.Tensor:
        """One draw's device work: rows x at the position, the head's logits (returned, [1, V] fp32; the
        reference fills an fp32 tensor: the same rounding), temperature, the penalty, the EOS bias, a
        draw into drawn[step], its embedding into step_input; position and step move on."""
        logits = linear(self._layers(x, span), self.head).float()
        scaled = self._penalise(logits / self.temperature)
        scaled[:, self.cfg.eos] += self.eos_bias  # -inf masks it (min_new_tokens), 0 leaves it as it is
        token = draw(F.softmax(scaled, dim=-1), self.generator)
        self.drawn.index_copy_(0, self.step, token.view(1))
        self.step_input.copy_(F.embedding(token.view(1), self.emb_code))
        self.position += x.shape[0]
        self.step += 1
        return logits

    def _penalise(self, logits: torch.Tensor) -> torch.Tensor:
        """CustomRepetitionPenaltyLogitsProcessorRepeat (line 6950) over this unit's last <= 16 draws before
        this one (none at the first: a factor of exactly 1): a logit below 0 is multiplied by
        penalty^count, any other divided by it."""
        window = self.cfg.penalty_window
        indices = self.step - window + torch.arange(window, device=self.device)
        valid = (indices >= 0).long().view(1, -1)
        counted = self.drawn.index_select(0, indices.clamp(min=0)).view(1, -1)
        # The reference's one_hot(...).sum(1), as a scatter: the same integer counts, without one_hot's
        # range check (a device sync) and its [window, V] intermediate.
        freq = torch.zeros_like(logits, dtype=torch.long).scatter_add_(1, counted, valid)
        alpha = torch.pow(self.cfg.repetition_penalty, freq)
        return torch.where(logits < 0, logits.multiply(alpha), logits.divide(alpha))

    def _forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """The Llama over rows x [T, hidden] at positions start.. -> the last row after the final norm."""
        self.position.fill_(start)
        return self._layers(x, self.span(start + x.shape[0]))

    def _layers(self, x: torch.Tensor, span: int) -> torch.Tensor:
        """The Llama over rows x [T, hidden] at positions self.position.. (their K/V written to the cache),
        attending over the cache's first `span` entries -> the last row after the final norm [1, hidden].
        Eager attention as the reference's (fp32 softmax)."""
        c = self.cfg
        T = x.shape[0]
        heads, kv_heads, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        positions = self.position + self.key_positions[:T]
        if self.fuses and fused_layers.fits(T):  # an online softmax for the reference's fp32 one: within noise
            h = x.contiguous()
            for i, layer in enumerate(self.layers):
                h = fused_layers.layer(h, layer, self.keys[i], self.values[i], self.cos, self.sin, self.position,
                                       span, None, heads, c.rms_norm_eps)
            return head_rms_norm(h[-1:], self.final_norm, c.rms_norm_eps)
        hidden_keys = self.key_positions[None, :span] > positions[:, None]  # [T, span]
        cos = self.cos.index_select(0, positions).to(self.dtype)
        sin = self.sin.index_select(0, positions).to(self.dtype)
        h = x
        for i, layer in enumerate(self.layers):
            r = head_rms_norm(h, layer["input_layernorm.weight"], c.rms_norm_eps)
            q = linear(r, layer["self_attn.q_proj.weight"]).view(T, heads, d).transpose(0, 1)
            k = linear(r, layer["self_attn.k_proj.weight"]).view(T, kv_heads, d).transpose(0, 1)
            v = linear(r, layer["self_attn.v_proj.weight"]).view(T, kv_heads, d).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            self.keys[i].index_copy_(1, positions, k)
            self.values[i].index_copy_(1, positions, v)
            keys, values = self.keys[i, :, :span], self.values[i, :, :span]
            if heads != kv_heads:  # repeat_kv's order: query head j reads kv head j // groups
                keys = keys.repeat_interleave(heads // kv_heads, dim=0)
                values = values.repeat_interleave(heads // kv_heads, dim=0)
            scores = torch.matmul(q, keys.transpose(1, 2)) * d ** -0.5
            scores = scores.masked_fill(hidden_keys, -math.inf)
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
            attended = torch.matmul(probs, values).transpose(0, 1).reshape(T, heads * d)
            h = h + linear(attended, layer["self_attn.o_proj.weight"])
            r = head_rms_norm(h, layer["post_attention_layernorm.weight"], c.rms_norm_eps)
            gate = F.silu(linear(r, layer["mlp.gate_proj.weight"]))
            h = h + linear(gate * linear(r, layer["mlp.up_proj.weight"]), layer["mlp.down_proj.weight"])
        return head_rms_norm(h[-1:], self.final_norm, c.rms_norm_eps)

