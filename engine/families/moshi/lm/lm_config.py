"""Moshi-family LM configurations: a dataclass, the named configs, and `config.json` parsing.

`config.json` uses the reference runtime's LM-kwargs format (the keyword arguments of
`moshi.models.lm.LMModel`, plus file-name metadata). Only the choices the released models
use are accepted: anything else would build a different network from the checkpoint's.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ....config.checks import bounded_float, bounded_int, is_int, shown
from ....config.transformer_config import TransformerConfig
from ....errors import CheckpointError
from ....files.paths import file_in

# Metadata keys of config.json that name files or describe the checkpoint, not the network.
METADATA_KEYS = ("moshi_name", "mimi_name", "tokenizer_name", "mimi_config_name", "model_type",
                 "lm_gen_config", "model_id", "tts_config", "stt_config", "lora_name")
FILE_KEYS = tuple(key for key in METADATA_KEYS if key.endswith("_name"))
"""The keys that name files beside config.json: each must stay inside the model's folder."""
# Our extension (ignored by the reference loader's LMModel, so kept out of its kwargs).
PROMPT_TOKENS_KEY = "duplexcadence_prompt_tokens"

# PersonaPlex's fixed Mimi codes for the model stream during prompts (a silent frame) and the
# user stream (a 440 Hz tone frame); from NVIDIA/personaplex moshi/models/lm.py.
SILENCE_TOKENS = (948, 243, 1178, 546, 1736, 1030, 1978, 2008)
SINE_TOKENS = (430, 1268, 381, 1611, 1095, 1495, 56, 472)
VARIANTS = ("moshi", "personaplex")


@dataclasses.dataclass(frozen=True)
class LMConfig:
    name: str
    dim: int
    num_heads: int
    num_layers: int
    hidden_scale: float
    context: int
    text_card: int
    card: int
    n_q: int
    """Audio streams in the input: model codebooks then user codebooks."""
    dep_q: int
    """Depformer steps: the model codebooks (Moshi), or model then user codebooks (PersonaPlex)."""
    delays: tuple[int, ...]
    depformer_dim: int
    depformer_num_heads: int
    depformer_num_layers: int
    depformer_dim_feedforward: int
    max_period: float = 10000.0
    depformer_max_period: float = 10000.0
    text_padding_id: int = 3
    text_end_padding_id: int = 0
    silence_tokens: tuple[int, ...] = SILENCE_TOKENS
    """PersonaPlex prompts: the model stream's codes during prompts, and the user stream's."""
    sine_tokens: tuple[int, ...] = SINE_TOKENS
    variant: str = "moshi"
    """Whose runtime conventions the checkpoint follows: "moshi" (Kyutai's) or "personaplex"
    (NVIDIA's: voice and role prompts, a priming first step, a window one frame shorter)."""

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"{self.name}: unknown variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        if self.variant == "personaplex" and not self.predicts_user:
            raise ValueError(f"{self.name}: a PersonaPlex depformer predicts the user's codebooks too (dep_q = n_q)")
        if len(self.delays) != self.n_q + 1:
            raise ValueError(f"{self.name}: {len(self.delays)} delays for {self.n_q + 1} streams")
        if min(self.delays) < 0:
            raise ValueError(f"{self.name}: delays must be >= 0")
        if self.dep_q not in (self.model_q, self.n_q) or self.n_q % 2:
            raise ValueError(f"{self.name}: dep_q {self.dep_q} must be n_q/2 (Moshi) or n_q (PersonaPlex)")
        prompts = self.variant == "personaplex"
        for what, toks in (("silence_tokens", self.silence_tokens), ("sine_tokens", self.sine_tokens)):
            if prompts and (len(toks) != self.model_q or not all(0 <= t < self.card for t in toks)):
                raise ValueError(f"{self.name}: {what} must be {self.model_q} codes below {self.card}")

    @property
    def model_q(self) -> int:
        """Codebooks of the model's own voice (the first half of the audio streams)."""
        return self.n_q // 2

    @property
    def user_q(self) -> int:
        return self.n_q - self.model_q

    @property
    def predicts_user(self) -> bool:
        """The depformer also predicts (and is teacher-forced on) the user's codebooks."""
        return self.dep_q == self.n_q

    @property
    def max_delay(self) -> int:
        return max(self.delays)

    @property
    def attention_window(self) -> int:
        """Past frames the temporal transformer attends to. NVIDIA's PersonaPlex runtime marks
        its KV ring's oldest slot as a future position once the ring is full, so it sees one
        frame less than `context` (checked against the fork: its context C gives the tokens of
        moshi 0.2.13 with context C - 1)."""
        return self.context - 1 if self.variant == "personaplex" else self.context

    def temporal(self) -> TransformerConfig:
        return TransformerConfig(
            d_model=self.dim, num_heads=self.num_heads, num_layers=self.num_layers,
            dim_feedforward=int(self.hidden_scale * self.dim), context=self.attention_window,
            norm="rms_norm_f32", gating="silu", rope=True, max_period=self.max_period, clock="frame")

    def depformer(self) -> TransformerConfig:
        return TransformerConfig(
            d_model=self.depformer_dim, num_heads=self.depformer_num_heads,
            num_layers=self.depformer_num_layers, dim_feedforward=self.depformer_dim_feedforward,
            context=None, norm="rms_norm_f32", gating="silu", rope=False,
            max_period=self.depformer_max_period, weights_per_step=self.dep_q, clock="fixed")


_MOSHI_7B = dict(
    dim=4096, num_heads=32, num_layers=32, hidden_scale=4.125, context=3000, text_card=32000,
    card=2048, n_q=16, dep_q=8, delays=(0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1),
    depformer_dim=1024, depformer_num_heads=16, depformer_num_layers=6,
    depformer_dim_feedforward=int(4.125 * 1024))

CONFIGS: dict[str, LMConfig] = {
    "moshiko": LMConfig(name="moshiko", **_MOSHI_7B),
    "moshika": LMConfig(name="moshika", **_MOSHI_7B),
    "personaplex": LMConfig(name="personaplex", **{**_MOSHI_7B, "dep_q": 16}, variant="personaplex"),
    # The bundled untrained model (packaging/make_demo_lm.py), PersonaPlex-shaped. Small enough
    # that its file stays under 5 MB (the 2048-entry audio tables dominate) and a frame takes
    # a few milliseconds on two cores; its prompt codes come from the demo Mimi at build time.
    "demo": LMConfig(
        name="demo (untrained, PersonaPlex-shaped)", dim=32, num_heads=4, num_layers=2,
        hidden_scale=4.125, context=3000, text_card=200, card=2048, n_q=16, dep_q=16,
        delays=_MOSHI_7B["delays"], depformer_dim=16, depformer_num_heads=2, depformer_num_layers=2,
        depformer_dim_feedforward=int(4.125 * 16), variant="personaplex"),
}

# --- config.json (reference LM-kwargs format) ---

# LMModel keyword -> LMConfig field.
_FIELDS = {
    "dim": "dim", "num_heads": "num_heads", "num_layers": "num_layers",
    "hidden_scale": "hidden_scale", "context": "context", "text_card": "text_card",
    "card": "card", "n_q": "n_q", "dep_q": "dep_q", "delays": "delays",
    "max_period": "max_period", "existing_text_padding_id": "text_padding_id",
    "existing_text_end_padding_id": "text_end_padding_id",
    "depformer_dim": "depformer_dim", "depformer_num_heads": "depformer_num_heads",
    "depformer_num_layers": "depformer_num_layers",
    "depformer_dim_feedforward": "depformer_dim_feedforward",
    "depformer_max_period": "depformer_max_period",
}
# Architecture choices the released models make: key -> (required value, the reference's
# default when the key is absent). Anything else builds a network we do not implement.
_FIXED = {
    "norm": ("rms_norm_f32", "layer_norm"), "gating": ("silu", "none"),
    "positional_embedding": ("rope", "sin"), "causal": (True, True),
    "layer_scale": (None, None), "depformer_layer_scale": (None, None),
    "depformer_gating": ("silu", None), "depformer_pos_emb": ("none", "sin"),
    "depformer_multi_linear": (True, False), "depformer_weights_per_step": (True, False),
    "norm_emb": (False, False), "bias_proj": (False, False), "depformer_norm": (None, None),
    "text_card_out": (None, None), "depformer_weights_per_step_schedule": (None, None),
    "depformer_low_rank_embeddings": (None, None), "demux_second_text_stream": (False, False),
    "demux_second_stream": (False, False), "extra_heads_num_heads": (0, 0),
    "conditioners": (None, None), "fuser": (None, None), "cross_attention": (False, False),
    "lora": (False, False), "quantize": (False, False),
}
# Keys the reference accepts and then ignores for these models.
# "quantize": the q8 checkpoints' flag; whether weights are int8 is read from the file itself.
_IGNORED = ("depformer_causal", "depformer_context", "extra_heads_dim", "lora_rank", "lora_scaling", "quantize")
# The reference's defaults for network keys a config.json may leave out.
_DEFAULTS = {"hidden_scale": 4, "max_period": 10000, "existing_text_padding_id": 3,
             "existing_text_end_padding_id": 0}


def from_lm_kwargs(kwargs: dict[str, Any], source: str, name: str) -> LMConfig:
    """An LMConfig from a reference-format config.json dict; problems raise CheckpointError
    naming `source` and the key."""
    for key in FILE_KEYS:
        if key in kwargs:
            file_in(Path(source).parent, kwargs[key], source, key)  # refuses a name out of the folder
    kw = {k: v for k, v in kwargs.items() if k not in METADATA_KEYS and k not in _IGNORED}
    prompt_tokens = kw.pop(PROMPT_TOKENS_KEY, None)
    for key in kw:
        if key not in _FIELDS and key not in _FIXED:
            raise CheckpointError(f"{source}: unknown key {key}")
    for key, (required, default) in _FIXED.items():
        if key == "depformer_gating":  # the depformer inherits the temporal choice
            default = kw.get("gating", _FIXED["gating"][1])
        value = kw.get(key, default)
        if value != required:
            raise CheckpointError(f"{source}: key {key} = {shown(value)} is not supported (need {required!r})")
    merged = {**_DEFAULTS, **kw}
    merged.setdefault("depformer_max_period", merged["max_period"])
    if "depformer_dim_feedforward" not in merged and "depformer_dim" in merged:
        merged["depformer_dim_feedforward"] = int(merged["hidden_scale"] * merged["depformer_dim"])
    fields = {}
    for key, field in _FIELDS.items():
        if key not in merged:
            raise CheckpointError(f"{source}: missing key {key}")
        fields[field] = _typed(merged[key], key, source)
    _check_tables(fields, source)
    fields["delays"] = tuple(fields["delays"])
    # config.json names no variant: of the released models, PersonaPlex's alone has a depformer
    # that predicts the user's codebooks too, so that is what marks its checkpoints.
    fields["variant"] = "personaplex" if fields["dep_q"] == fields["n_q"] else "moshi"
    if prompt_tokens is not None:
        fields.update(_prompt_tokens(prompt_tokens, source))
    try:
        cfg = LMConfig(name=name, **fields)
        cfg.temporal(), cfg.depformer()  # their own checks, while the file can still be named
        return cfg
    except ValueError as exc:
        raise CheckpointError(f"{source}: {exc}") from None


def to_lm_kwargs(cfg: LMConfig) -> dict[str, Any]:
    """The reference-format dict for `cfg` (what make_demo_lm writes as config.json).

    Prompt tokens other than PersonaPlex's go under our own key, which the reference
    runtime does not know: such a file is ours only."""
    out: dict[str, Any] = {key: getattr(cfg, field) for key, field in _FIELDS.items()}
    out["delays"] = list(cfg.delays)
    for key in ("norm", "gating", "positional_embedding", "causal", "layer_scale",
                "depformer_layer_scale", "depformer_gating", "depformer_pos_emb",
                "depformer_multi_linear", "depformer_weights_per_step"):
        out[key] = _FIXED[key][0]
    if (cfg.silence_tokens, cfg.sine_tokens) != (SILENCE_TOKENS, SINE_TOKENS):
        out[PROMPT_TOKENS_KEY] = {"silence": list(cfg.silence_tokens), "sine": list(cfg.sine_tokens)}
    return out


# Bounds on config.json's numbers, checked before anything is built (engine.config.checks):
# key -> (least, most). The released 7B models' values: dim 4096, 32 heads, 32 layers, context
# 3000 frames (4 minutes), text_card 32000, card 2048, n_q 16, depformer 1024 wide, 16 heads,
# 6 layers, 4224 FFN. The context sizes the KV ring, allocated whole by the full placement.
_INT_BOUNDS = {
    "dim": (1, 16384), "num_heads": (1, 256), "num_layers": (1, 128), "context": (1, 16384),
    "text_card": (1, 262144), "card": (1, 65536), "n_q": (1, 64), "dep_q": (1, 64),
    "depformer_dim": (1, 16384), "depformer_num_heads": (1, 256), "depformer_num_layers": (1, 128),
    "depformer_dim_feedforward": (1, 65536),
}
_FLOAT_BOUNDS = {"hidden_scale": (0.25, 16.0), "max_period": (1.0, 1e9), "depformer_max_period": (1.0, 1e9)}
_MAX_DELAY = 1000
"""Frames a stream may lag the text (released models: 0 or 1)."""


def _typed(value: Any, key: str, source: str):
    if key == "delays":
        if not (isinstance(value, list) and all(is_int(v) for v in value)):
            raise CheckpointError(f"{source}: delays must be a list of integers")
        for i, delay in enumerate(value):
            bounded_int(delay, f"delays[{i}]", source, 0, _MAX_DELAY)
        return value
    if key in _FLOAT_BOUNDS:
        return bounded_float(value, key, source, *_FLOAT_BOUNDS[key])
    if key in _INT_BOUNDS:
        return bounded_int(value, key, source, *_INT_BOUNDS[key])
    if not is_int(value):  # a padding id: bounded by text_card in _check_tables
        raise CheckpointError(f"{source}: {key} = {shown(value)} must be an integer")
    return value


def _check_tables(fields: dict, source: str) -> None:
    """Ids inside the tables they index, and head widths the attention can split."""
    for key in ("existing_text_padding_id", "existing_text_end_padding_id"):
        bounded_int(fields[_FIELDS[key]], key, source, 0, fields["text_card"] - 1)
    for dim, heads in (("dim", "num_heads"), ("depformer_dim", "depformer_num_heads")):
        if fields[dim] % fields[heads]:
            raise CheckpointError(f"{source}: {heads} = {fields[heads]} does not divide {dim} = {fields[dim]}")
    if (fields["dim"] // fields["num_heads"]) % 2:
        raise CheckpointError(f"{source}: num_heads = {fields['num_heads']} leaves an odd head dimension "
                              f"(dim / num_heads must be even for RoPE)")
    if int(fields["hidden_scale"] * fields["dim"]) < 1:
        raise CheckpointError(f"{source}: hidden_scale = {fields['hidden_scale']} gives no FFN width")


def _prompt_tokens(value: Any, source: str) -> dict[str, tuple[int, ...]]:
    if not (isinstance(value, dict) and set(value) == {"silence", "sine"}
            and all(isinstance(v, list) and all(is_int(t) for t in v) for v in value.values())):
        raise CheckpointError(f"{source}: key {PROMPT_TOKENS_KEY} must hold lists 'silence' and 'sine'")
    return {"silence_tokens": tuple(value["silence"]), "sine_tokens": tuple(value["sine"])}

