"""The DiffuPlex predictor: what lets one backbone wake predict a block of future frames.

Frozen base weights, plus
- one learned MASK embedding per stream (text, model codebooks, user codebooks), fed where a
  future position's input token is not known yet;
- LoRA adapters on the temporal transformer's projections (rank and targets configurable), applied
  only at masked future positions, so real history is computed exactly as the AR model computes it.

Stored as one safetensors file: `mask_embeddings` [n_q + 1, dim], `lora.<target>.a` [layers, rank,
in] and `lora.<target>.b` [layers, out, rank], and the JSON metadata under the key "diffuplex":
format, the base model's identity and shape, rank, alpha, targets, block size K, masking scheme, and
the training settings. A file for another model is refused, naming it.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from ....config.checks import bounded_float, bounded_int, parse_json, shown
from ....errors import CheckpointError
from ..lm.lm_config import LMConfig

FORMAT = 1
TARGETS = ("qkv", "out", "ffn_in", "ffn_out")
MASKING = ("staircase",)


def base_identity(cfg: LMConfig) -> dict[str, Any]:
    """What an adapter must match: the shape of the base LM it was trained on."""
    keys = ("dim", "num_heads", "num_layers", "hidden_scale", "text_card", "card", "n_q", "dep_q", "delays")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ((k, getattr(cfg, k)) for k in keys)}


@dataclasses.dataclass(frozen=True)
class PredictorSpec:
    base: dict[str, Any]
    rank: int
    alpha: float
    targets: tuple[str, ...]
    block: int
    """K: future positions one wake predicts."""
    masking: str = "staircase"
    training: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.rank < 1 or self.block < 1 or not self.targets:
            raise ValueError("rank and block must be >= 1, with at least one target")
        unknown = set(self.targets) - set(TARGETS)
        if unknown:
            raise ValueError(f"unknown LoRA target {sorted(unknown)[0]!r}; choose from {', '.join(TARGETS)}")
        if self.masking not in MASKING:
            raise ValueError(f"unknown masking {self.masking!r}; choose from {', '.join(MASKING)}")

    def metadata(self) -> str:
        return json.dumps({"format": FORMAT, **dataclasses.asdict(self)})


def _shapes(cfg: LMConfig) -> dict[str, tuple[int, int]]:
    """(in, out) of each target projection of a temporal layer."""
    d, hidden = cfg.dim, cfg.temporal().gated_hidden
    return {"qkv": (d, 3 * d), "out": (d, d), "ffn_in": (d, 2 * hidden), "ffn_out": (hidden, d)}


class _Rows:
    """The adapter bound to the last `rows` positions of one step (engine.transformer.Adapter)."""

    def __init__(self, predictor: Predictor, rows: int):
        self.predictor, self.rows = predictor, rows

    def adapts(self, target: str) -> bool:
        return target in self.predictor.spec.targets

    def add_delta(self, target: str, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        p = self.predictor
        a, b = p.lora_a[target][layer], p.lora_b[target][layer]
        if p.scale != 1.0:
            b = b * p.scale
        y.addmm_((x.to(a.dtype) @ a.T).to(y.dtype), b.T.to(y.dtype))  # two kernels per target

    def lora(self, target: str, layer: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(A [rank, in], B [out, rank], scale) of `target` in `layer`: what the fused layers
        compute add_delta's correction from, inside the product's kernels."""
        p = self.predictor
        return p.lora_a[target][layer], p.lora_b[target][layer], p.scale


class Predictor(nn.Module):
    def __init__(self, spec: PredictorSpec, cfg: LMConfig):
        super().__init__()
        if spec.base != base_identity(cfg):
            raise ValueError(f"the predictor was made for another base model: {_first_difference(spec.base, cfg)}")
        self.spec, self.scale = spec, spec.alpha / spec.rank
        self.mask_embeddings = nn.Parameter(torch.zeros(cfg.n_q + 1, cfg.dim))
        shapes = _shapes(cfg)
        self.lora_a = nn.ParameterDict({t: nn.Parameter(torch.zeros(cfg.num_layers, spec.rank, shapes[t][0]))
                                        for t in spec.targets})
        self.lora_b = nn.ParameterDict({t: nn.Parameter(torch.zeros(cfg.num_layers, shapes[t][1], spec.rank))
                                        for t in spec.targets})

    def at_last(self, rows: int) -> _Rows:
        """The LoRA acting on the last `rows` positions of a step: the masked future ones."""
        return _Rows(self, rows)

    def state(self) -> dict[str, torch.Tensor]:
        out = {"mask_embeddings": self.mask_embeddings}
        for t in self.spec.targets:
            out[f"lora.{t}.a"], out[f"lora.{t}.b"] = self.lora_a[t], self.lora_b[t]
        return {k: v.detach().contiguous().cpu() for k, v in out.items()}


def new_predictor(cfg: LMConfig, rank: int = 8, block: int = 4, targets: tuple[str, ...] = TARGETS,
                  alpha: float | None = None, seed: int = 0, training: dict | None = None) -> Predictor:
    """An untrained predictor: MASK embeddings and LoRA A drawn small, LoRA B zero (so it starts
    as the base model with MASK inputs, as LoRA training does)."""
    spec = PredictorSpec(base_identity(cfg), rank, float(alpha or rank), tuple(targets), block,
                         training=training or {})
    predictor = Predictor(spec, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        predictor.mask_embeddings.normal_(0, 0.02, generator=gen)
        for a in predictor.lora_a.values():
            a.normal_(0, a.shape[-1] ** -0.5, generator=gen)
    return predictor


def save_predictor(predictor: Predictor, path: str | Path) -> None:
    save_file(predictor.state(), str(path), metadata={"diffuplex": predictor.spec.metadata()})


def load_predictor(path: str | Path, cfg: LMConfig, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32) -> Predictor:
    """A predictor file checked against the LM it will run on; any problem raises
    CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        with safe_open(str(path), "pt") as f:
            raw = (f.metadata() or {}).get("diffuplex")
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not iterable)
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    if raw is None:
        raise CheckpointError(f"{path}: no DiffuPlex metadata (not a predictor file)")
    spec = read_spec(raw, path, cfg)
    _check_tensors(tensors, spec, cfg, path)  # before the spec's sizes are allocated
    predictor = Predictor(spec, cfg)
    with torch.no_grad():
        predictor.mask_embeddings.copy_(tensors["mask_embeddings"])
        for t in spec.targets:
            predictor.lora_a[t].copy_(tensors[f"lora.{t}.a"])
            predictor.lora_b[t].copy_(tensors[f"lora.{t}.b"])
    return predictor.to(device=device, dtype=dtype).eval().requires_grad_(False)


# Bounds on the metadata's sizes: the LoRA rank (the demo's: 8) and the block K, which the
# training command bounds the same way (1..16); a wake's graphs are captured for every K up to it.
MAX_RANK, MAX_BLOCK = 1024, 16
_KEYS = {"base", "rank", "alpha", "targets", "block", "masking", "training"}


def read_spec(raw: object, path: Path, cfg: LMConfig) -> PredictorSpec:
    """The metadata string of a predictor file as a spec, every value typed and bounded and
    the base model checked against `cfg`; problems raise CheckpointError naming the file."""
    source = f"{path}: metadata diffuplex"
    meta = parse_json(raw, source) if isinstance(raw, str) else raw
    if not isinstance(meta, dict):
        raise CheckpointError(f"{source} must be a JSON object, found {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{source}: format = {shown(meta.get('format'))} is not supported "
                              f"(this build reads format {FORMAT})")
    unknown, missing = sorted(set(meta) - _KEYS - {"format"}), sorted(_KEYS - {"masking", "training"} - set(meta))
    if unknown or missing:
        raise CheckpointError(f"{source}: " + (f"unknown key {unknown[0]}" if unknown else f"missing key {missing[0]}"))
    base, targets = meta["base"], meta["targets"]
    if not isinstance(base, dict):
        raise CheckpointError(f"{source}: base must be an object, found {shown(base)}")
    if base != base_identity(cfg):
        raise CheckpointError(f"{path}: the predictor was made for another base model: {_first_difference(base, cfg)}")
    if not (isinstance(targets, list) and targets and all(t in TARGETS for t in targets)
            and len(set(targets)) == len(targets)):
        raise CheckpointError(f"{source}: targets = {shown(targets)} must be distinct names from {', '.join(TARGETS)}")
    masking, training = meta.get("masking", MASKING[0]), meta.get("training", {})
    if masking not in MASKING:
        raise CheckpointError(f"{source}: masking = {shown(masking)} is not one of {', '.join(MASKING)}")
    if not isinstance(training, dict):
        raise CheckpointError(f"{source}: training must be an object, found {shown(training)}")
    return PredictorSpec(base, bounded_int(meta["rank"], "rank", source, 1, MAX_RANK),
                         bounded_float(meta["alpha"], "alpha", source, 0.0, 1e4), tuple(targets),
                         bounded_int(meta["block"], "block", source, 1, MAX_BLOCK), masking, training)


def _check_tensors(tensors: dict[str, torch.Tensor], spec: PredictorSpec, cfg: LMConfig, path: Path) -> None:
    shapes = _shapes(cfg)
    own = {"mask_embeddings": (cfg.n_q + 1, cfg.dim)}
    for t in spec.targets:
        own[f"lora.{t}.a"] = (cfg.num_layers, spec.rank, shapes[t][0])
        own[f"lora.{t}.b"] = (cfg.num_layers, shapes[t][1], spec.rank)
    for key, shape in own.items():
        if key not in tensors:
            raise CheckpointError(f"{path}: missing key {key}")
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(f"{path}: key {key} has shape {list(tensors[key].shape)}, expected {list(shape)}")
        if not tensors[key].dtype.is_floating_point:
            raise CheckpointError(f"{path}: key {key} has dtype {tensors[key].dtype}, expected floating point")
        if not torch.isfinite(tensors[key]).all():
            raise CheckpointError(f"{path}: key {key} holds NaN or infinite values")
    extra = sorted(tensors.keys() - own.keys())
    if extra:
        raise CheckpointError(f"{path}: unexpected key {extra[0]}")


def _first_difference(base: dict, cfg: LMConfig) -> str:
    ours = base_identity(cfg)
    for key in sorted(set(base) | set(ours)):
        if base.get(key) != ours.get(key):
            return f"{key} {base.get(key)!r}, this model has {ours.get(key)!r}"
    return "no difference"
