"""Loading the LM alone from a `model.safetensors` in the official layout."""
from __future__ import annotations

from pathlib import Path

import torch

from ..checkpoint import load_into, read_safetensors
from ..config.lm import LMConfig
from ..errors import CheckpointError
from ..options import WEIGHTS
from ..quant import int8_layout, is_q8, quantize_checkpoint
from .moshi_lm import MoshiLM


def load_lm(path: str | Path, cfg: LMConfig, device: str | torch.device = "cpu",
            dtype: torch.dtype = torch.float32, weights: str | None = None) -> MoshiLM:
    """Just the LM, from a `model.safetensors` (or `model.q8.safetensors`) in the official layout."""
    return build_lm(cfg, read_safetensors(path), Path(path), torch.device(device), dtype, weights)


def build_lm(cfg: LMConfig, tensors: dict, path: Path, device: torch.device, dtype: torch.dtype,
             weights: str | None = None) -> MoshiLM:
    """`weights`: "bf16" (the file's float weights, in `dtype`), "int8" (the q8 layout: read
    as it is, or quantized per row here from a float checkpoint), None: as the file holds them."""
    q8 = is_q8(tensors)
    weights = weights or ("int8" if q8 else "bf16")
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; choose one of {', '.join(WEIGHTS)}")
    if q8 and weights != "int8":
        raise CheckpointError(f"{path}: holds int8 weights (the q8 layout); load it with weights int8")
    # Built without initializing: every parameter comes from the file, allocated once in its
    # final dtype on its final device (a 7B LM does not fit twice).
    with torch.device("meta"):
        lm = MoshiLM(cfg)
    lm.to(dtype=dtype)
    if weights == "int8":
        names = int8_layout(lm)  # after the cast: the per-row scales stay float32
        if not q8:
            tensors = quantize_checkpoint(tensors, names, device)
    _check_layout(lm, tensors, path)
    lm.to_empty(device=device)
    load_into(lm, tensors, path)
    return lm.eval().requires_grad_(False)


def _check_layout(lm: MoshiLM, tensors: dict, path: Path) -> None:
    """Keys and shapes first, so a checkpoint that does not fit fails before 7B of memory is
    allocated for it (load_into checks again, with values)."""
    own = {k: tuple(v.shape) for k, v in lm.state_dict().items()}
    missing, unexpected = sorted(own.keys() - tensors.keys()), sorted(tensors.keys() - own.keys())
    if missing:
        raise CheckpointError(f"{path}: missing key {missing[0]} ({len(missing)} missing)")
    if unexpected:
        raise CheckpointError(f"{path}: unexpected key {unexpected[0]} ({len(unexpected)} unexpected)")
    for key, shape in own.items():
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(f"{path}: key {key} has shape {list(tensors[key].shape)}, expected {list(shape)}")
