"""Loading the LM alone from a `model.safetensors` in the official layout."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from ....errors import CheckpointError
from ....files.paths import LM_NAME, LM_Q8_NAME
from ....loading.safetensors_files import check_layout, load_into, read_safetensors
from ....options import WEIGHTS
from ....weights.int4 import int4_layout, is_int4, is_table, layout_problem, quantize_checkpoint4, read_metadata
from ....weights.int8 import int8_layout, is_q8, quantize_checkpoint
from .lm_config import LMConfig
from .moshi_lm import MoshiLM

log = logging.getLogger(__name__)


def load_lm(path: str | Path, cfg: LMConfig, device: str | torch.device = "cpu",
            dtype: torch.dtype = torch.float32, weights: str | None = None) -> MoshiLM:
    """Just the LM, from a `model.safetensors` (or `model.q8.safetensors`) in the official layout."""
    return build_lm(cfg, read_safetensors(path), Path(path), torch.device(device), dtype, weights)


def build_lm(cfg: LMConfig, tensors: dict, path: Path, device: torch.device, dtype: torch.dtype,
             weights: str | None = None) -> MoshiLM:
    """`weights`: "bf16" (the file's float weights, in `dtype`), "int8" (the q8 layout: read
    as it is, or quantized per row here from a float checkpoint), "int4" (our int4 layout,
    engine.weights.int4: read as it is, or quantized here from a float or q8 checkpoint), None: as
    the file holds them."""
    q8, q4 = is_q8(tensors), is_int4(tensors)
    choice = weights_choice(path)
    if choice:
        log.warning("%s", choice)
    weights = weights or ("int8" if q8 else "int4" if q4 else "bf16")
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; choose one of {', '.join(WEIGHTS)}")
    if q8 and weights not in ("int8", "int4"):
        raise CheckpointError(f"{path}: holds int8 weights (the q8 layout); load it with weights int8 or int4")
    if q4 and weights != "int4":
        raise CheckpointError(f"{path}: holds int4 weights (our int4 layout); load it with weights int4")
    # Built without initializing: every parameter comes from the file, allocated once in its
    # final dtype on its final device (a 7B LM does not fit twice).
    with torch.device("meta"):
        lm = MoshiLM(cfg)
    lm.to(dtype=dtype)
    if weights == "int8":
        names = int8_layout(lm)  # after the cast: the per-row scales stay float32
        if not q8:
            tensors = quantize_checkpoint(tensors, names, device)
    elif weights == "int4":
        names = int4_layout(lm)  # after the cast: the group scales stay bfloat16, the row scales float32
        problem = layout_problem(tensors, read_metadata(path)) if q4 else None
        if problem:
            raise CheckpointError(f"{path}: {problem}")
        if q4 and any(is_table(k) and v.dtype.is_floating_point for k, v in tensors.items()):
            log.info("%s: float embedding tables (written before they were int8): quantized on load", path)
        # An int4 file's linears are read as they are; its tables are quantized if still float.
        tensors = quantize_checkpoint4(tensors, [] if q4 else names, device)
    # Keys and shapes first, so a checkpoint that does not fit fails before 7B of memory is
    # allocated for it (load_into checks again, with values).
    check_layout(lm, tensors, path)
    lm.to_empty(device=device)
    load_into(lm, tensors, path)
    return lm.eval().requires_grad_(False)


def weights_choice(path: Path) -> str | None:
    """With both official LM files in a folder, which one `path` is and why it was chosen (for
    the log and the user); None when the folder holds one."""
    path = Path(path)
    names = {LM_NAME, LM_Q8_NAME}
    if path.name not in names:
        return None
    other = path.with_name((names - {path.name}).pop())
    if not other.is_file():
        return None
    why = ("config.json's moshi_name names it" if path.name == LM_Q8_NAME else
           f"{LM_NAME} is read first when config.json's moshi_name names no other")
    return f"{path.parent}: both {LM_NAME} and {LM_Q8_NAME} are here; loading {path.name} ({why})"
