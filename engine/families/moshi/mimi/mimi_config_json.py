"""Reading a `mimi_config.json` (the reference's `_mimi_config` format) into a MimiConfig.

Top-level `sample_rate`, `frame_rate`, `channels` and sections `seanet`, `quantizer`,
`transformer` whose keys are the reference constructors' keyword arguments. A file may
give only some keys; the rest keep the official values. Only the choices Mimi actually
uses are accepted (causal convs, no weight norm, ELU, RoPE...): anything else would
silently build a different network from the one the checkpoint was trained as. Every
problem raises CheckpointError naming the file and the key.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from ....config.checks import bounded_float, bounded_int, is_int, is_number, read_json, shown
from ....config.transformer_config import TransformerConfig
from ....errors import CheckpointError
from .mimi_config import OFFICIAL, MimiConfig, ProjectedTransformerConfig, QuantizerConfig, SeanetConfig

# Accepted keys and their JSON types: "int", "num" (int or float), "bool", "str", "ints"
# (list of ints), "dict", "num?" (number or null). Optional keys have defaults below.
_TOP = {"sample_rate": "int", "channels": "int", "frame_rate": "num",
        "seanet": "dict", "quantizer": "dict", "transformer": "dict"}
_SECTIONS = {
    "seanet": {
        "channels": "int", "dimension": "int", "causal": "bool", "n_filters": "int",
        "n_residual_layers": "int", "activation": "str", "activation_params": "dict",
        "compress": "int", "dilation_base": "int", "disable_norm_outer_blocks": "int",
        "kernel_size": "int", "residual_kernel_size": "int", "last_kernel_size": "int",
        "norm": "str", "norm_params": "dict", "pad_mode": "str", "ratios": "ints",
        "true_skip": "bool",
    },
    "quantizer": {
        "dimension": "int", "n_q": "int", "bins": "int", "input_dimension": "int",
        "output_dimension": "int", "n_q_semantic": "int",
    },
    "transformer": {
        "d_model": "int", "num_heads": "int", "num_layers": "int", "causal": "bool",
        "layer_scale": "num?", "context": "int", "conv_layout": "bool", "max_period": "num",
        "gating": "str", "norm": "str", "positional_embedding": "str",
        "dim_feedforward": "int", "input_dimension": "int", "output_dimensions": "ints",
    },
}
_OPTIONAL = {"seanet": {"activation_params": {"alpha": 1.0}, "norm_params": {}},
             "quantizer": {"n_q_semantic": 1}, "transformer": {}}


def official_config() -> MimiConfig:
    return parse_config({}, "<official Mimi config>")


def load_config(path: str | Path) -> MimiConfig:
    return parse_config(read_json(path), str(path))


def parse_config(overrides: dict, source: str) -> MimiConfig:
    """Official config with `overrides` applied; bad keys, types or values raise
    CheckpointError naming `source` and the key."""
    raw = copy.deepcopy(OFFICIAL)
    _check_keys(overrides, _TOP, source, "")
    for key, value in overrides.items():
        if key in _SECTIONS:
            _check_keys(value, _SECTIONS[key], source, key + ".")
            raw[key].update(copy.deepcopy(value))
        else:
            raw[key] = value
    for section, extra in _OPTIONAL.items():
        for key, value in extra.items():
            raw[section].setdefault(key, copy.deepcopy(value))
    cfg = _build(raw, _Checker(source))  # plain data: its checks first, then the bounds
    _check_bounds(raw, source)
    return cfg


# Bounds on the numbers that size Mimi's layers and state, checked before anything is built:
# key -> (least, most). The official Mimi's values are in OFFICIAL (mimi.py): SEANet 512 wide
# from 64 filters over 4 ratios of at most 8, 32 codebooks of 2048 entries 256 wide, an
# 8-layer transformer 512 wide with 8 heads, FFN 2048 and a context of 250 steps.
_INT_BOUNDS = {
    "sample_rate": (8000, 192000),
    "seanet.dimension": (1, 4096), "seanet.n_filters": (1, 1024), "seanet.n_residual_layers": (0, 16),
    "seanet.kernel_size": (1, 64), "seanet.residual_kernel_size": (1, 64), "seanet.last_kernel_size": (1, 64),
    "seanet.dilation_base": (1, 8), "seanet.compress": (1, 64), "seanet.disable_norm_outer_blocks": (0, 16),
    "quantizer.dimension": (1, 4096), "quantizer.n_q": (1, 64), "quantizer.bins": (1, 65536),
    "quantizer.n_q_semantic": (1, 64), "quantizer.input_dimension": (1, 4096),
    "quantizer.output_dimension": (1, 4096),
    "transformer.d_model": (1, 4096), "transformer.num_heads": (1, 128), "transformer.num_layers": (1, 64),
    "transformer.context": (1, 4096), "transformer.dim_feedforward": (1, 16384),
    "transformer.input_dimension": (1, 4096),
}
_FLOAT_BOUNDS = {"frame_rate": (1.0, 1000.0), "transformer.max_period": (1.0, 1e9),
                 "transformer.layer_scale": (0.0, 100.0), "seanet.activation_params.alpha": (0.0, 100.0)}
_MAX_RATIOS, _MAX_RATIO = 8, 64
_MAX_SEANET_WIDTH = 16384
"""SEANet doubles its channels at each ratio: n_filters * 2 ** len(ratios) (official: 1024)."""


def _lookup(raw: dict, key: str):
    value = raw
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _check_bounds(raw: dict, source: str) -> None:
    for key, (low, high) in _INT_BOUNDS.items():
        bounded_int(_lookup(raw, key), key, source, low, high)
    for key, (low, high) in _FLOAT_BOUNDS.items():
        value = _lookup(raw, key)
        if value is not None:
            bounded_float(value, key, source, low, high)
    for key in ("seanet.ratios", "transformer.output_dimensions"):
        values = _lookup(raw, key)
        if len(values) > _MAX_RATIOS:
            raise CheckpointError(f"{source}: {key} has {len(values)} entries (at most {_MAX_RATIOS})")
        for i, value in enumerate(values):
            bounded_int(value, f"{key}[{i}]", source, 1, _MAX_RATIO if key == "seanet.ratios" else 4096)
    width = raw["seanet"]["n_filters"] * 2 ** len(raw["seanet"]["ratios"])
    if width > _MAX_SEANET_WIDTH:
        raise CheckpointError(f"{source}: seanet.n_filters * 2 ** len(seanet.ratios) = {width} is out of range "
                              f"(at most {_MAX_SEANET_WIDTH})")


def _check_keys(d: Any, schema: dict, source: str, prefix: str) -> None:
    if not isinstance(d, dict):
        raise CheckpointError(f"{source}: key {prefix.rstrip('.') or '<root>'} must be an object")
    for key, value in d.items():
        if key not in schema:
            raise CheckpointError(f"{source}: unknown key {prefix}{key}")
        if not _has_type(value, schema[key]):
            raise CheckpointError(
                f"{source}: key {prefix}{key} must be {_TYPE_WORDS[schema[key]]}, found {shown(value)}")


_TYPE_WORDS = {"int": "an integer", "num": "a number", "num?": "a number or null",
               "bool": "true or false", "str": "a string", "ints": "a list of integers",
               "dict": "an object"}


def _has_type(value: Any, kind: str) -> bool:
    is_num = is_number(value) and math.isfinite(value)
    return {
        "int": is_int(value),
        "num": is_num,
        "num?": value is None or is_num,
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "ints": isinstance(value, list) and bool(value)
                and all(is_int(v) for v in value),
        "dict": isinstance(value, dict),
    }[kind]


class _Checker:
    def __init__(self, source: str):
        self.source = source

    def require(self, ok: bool, key: str, why: str) -> None:
        if not ok:
            raise CheckpointError(f"{self.source}: key {key}: {why}")

    def positive(self, section: dict, prefix: str, *keys: str) -> None:
        for key in keys:
            value = section[key]
            values = value if isinstance(value, list) else [value]
            self.require(all(v > 0 for v in values), prefix + key, f"must be positive, found {value!r}")


def _build(raw: dict, chk: _Checker) -> MimiConfig:
    chk.positive(raw, "", "sample_rate", "frame_rate", "channels")
    chk.require(raw["channels"] == 1, "channels", "only mono (1) is supported")
    seanet = _seanet(raw["seanet"], raw["channels"], chk)
    frame_size = raw["sample_rate"] / raw["frame_rate"]
    chk.require(frame_size == int(frame_size), "frame_rate",
                f"sample_rate / frame_rate must be a whole number of samples, found {frame_size}")
    chk.require(int(frame_size) % seanet.hop_length == 0, "frame_rate",
                f"frame size {int(frame_size)} must be a multiple of the SEANet hop "
                f"{seanet.hop_length} (product of seanet.ratios)")
    return MimiConfig(sample_rate=raw["sample_rate"], frame_rate=float(raw["frame_rate"]),
                      seanet=seanet, quantizer=_quantizer(raw["quantizer"], seanet.dimension, chk),
                      transformer=_transformer(raw["transformer"], seanet.dimension, chk), raw=raw)


def _seanet(s: dict, channels: int, chk: _Checker) -> SeanetConfig:
    chk.positive(s, "seanet.", "channels", "dimension", "n_filters", "ratios", "kernel_size",
                 "residual_kernel_size", "last_kernel_size", "dilation_base", "compress")
    chk.require(s["n_residual_layers"] >= 0, "seanet.n_residual_layers", "must not be negative")
    chk.require(s["channels"] == channels, "seanet.channels", "must equal channels")
    chk.require(s["causal"] is True, "seanet.causal", "Mimi is causal (true)")
    chk.require(s["activation"] == "ELU", "seanet.activation", "only ELU is supported")
    params = s["activation_params"]
    chk.require(set(params) <= {"alpha"} and _has_type(params.get("alpha", 1.0), "num"),
                "seanet.activation_params", "only a numeric alpha is supported")
    chk.require(s["norm"] == "none", "seanet.norm",
                "only 'none' (weight norm is folded into the weights of released checkpoints)")
    chk.require(s["pad_mode"] in ("constant", "replicate"), "seanet.pad_mode",
                "must be 'constant' or 'replicate'")
    chk.require(s["compress"] <= s["n_filters"], "seanet.compress",
                "must not exceed n_filters (residual branches would have no channels)")
    return SeanetConfig(
        channels=s["channels"], dimension=s["dimension"], n_filters=s["n_filters"],
        n_residual_layers=s["n_residual_layers"], ratios=tuple(s["ratios"]),
        kernel_size=s["kernel_size"], residual_kernel_size=s["residual_kernel_size"],
        last_kernel_size=s["last_kernel_size"], dilation_base=s["dilation_base"],
        compress=s["compress"], true_skip=s["true_skip"], pad_mode=s["pad_mode"],
        elu_alpha=float(params.get("alpha", 1.0)))


def _quantizer(q: dict, latent_dim: int, chk: _Checker) -> QuantizerConfig:
    chk.positive(q, "quantizer.", "dimension", "n_q", "bins", "n_q_semantic",
                 "input_dimension", "output_dimension")
    chk.require(q["n_q"] > q["n_q_semantic"], "quantizer.n_q", "must exceed n_q_semantic")
    for key in ("input_dimension", "output_dimension"):
        chk.require(q[key] == latent_dim, "quantizer." + key, "must equal seanet.dimension")
    return QuantizerConfig(**{k: q[k] for k in (
        "dimension", "n_q", "bins", "n_q_semantic", "input_dimension", "output_dimension")})


def _transformer(t: dict, latent_dim: int, chk: _Checker) -> ProjectedTransformerConfig:
    chk.positive(t, "transformer.", "d_model", "num_heads", "num_layers", "context",
                 "max_period", "dim_feedforward", "input_dimension", "output_dimensions")
    for key, want in (("causal", True), ("conv_layout", True), ("gating", "none"),
                      ("norm", "layer_norm"), ("positional_embedding", "rope")):
        chk.require(t[key] == want, "transformer." + key, f"Mimi uses {want!r}")
    chk.require(t["d_model"] % t["num_heads"] == 0, "transformer.num_heads", "must divide d_model")
    chk.require((t["d_model"] // t["num_heads"]) % 2 == 0, "transformer.num_heads",
                "head dimension must be even for RoPE")
    chk.require(t["input_dimension"] == latent_dim, "transformer.input_dimension",
                "must equal seanet.dimension")
    chk.require(t["output_dimensions"] == [latent_dim], "transformer.output_dimensions",
                "must be [seanet.dimension]")
    core = TransformerConfig(
        d_model=t["d_model"], num_heads=t["num_heads"], num_layers=t["num_layers"],
        dim_feedforward=t["dim_feedforward"], context=t["context"], norm="layer_norm",
        gating="none", layer_scale=None if t["layer_scale"] is None else float(t["layer_scale"]),
        rope=True, max_period=float(t["max_period"]), clock="mimi_step")
    return ProjectedTransformerConfig(core, t["input_dimension"], t["output_dimensions"][0])
