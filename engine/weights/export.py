"""Writing a float checkpoint's LM in the official q8 layout (`model.q8.safetensors`), beside
copies of the rest of its files, so the result loads here and in the stock runtime as the
official q8 checkpoints do; or a float or q8 one's in our int4 layout (`model.int4.safetensors`,
engine.weights.int4), which loads here only."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..families.moshi.lm.moshi_lm import MoshiLM
from ..families.moshi.model import read_lm_checkpoint
from ..files.outputs import OutputFiles
from ..files.paths import LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME
from .int4 import LM_INT4_NAME, int4_layout, int4_metadata, is_int4, quantize_checkpoint4
from .int8 import int8_layout, is_q8, quantize_checkpoint

_COPIED = {"mimi_name": MIMI_NAME, "tokenizer_name": TOKENIZER_NAME}
"""config.json keys naming files to copy -> the file name where a config leaves them out."""


def export_q8(source: str | Path, output: str | Path, device: str | torch.device = "cpu") -> Path:
    """Quantize `source`'s LM per row (on `device`) and write the checkpoint directory
    `output`: model.q8.safetensors, config.json naming it, and copies of the Mimi, the
    tokenizer, voices and a DiffuPlex predictor where the source has them."""
    return _export(source, output, device, "q8", is_q8, int8_layout, quantize_checkpoint, torch.int8,
                   LM_Q8_NAME, {"quantize": True}, "a float matrix")


def export_int4(source: str | Path, output: str | Path, device: str | torch.device = "cpu") -> Path:
    """Quantize `source`'s LM (float or q8) group-wise to int4 (engine.weights.int4, on `device`) and
    write the checkpoint directory `output` as export_q8 does, the LM as model.int4.safetensors."""
    # Without the stock runtime's q8 switch ("quantize"): it reads no int4.
    return _export(source, output, device, "int4", is_int4, int4_layout, quantize_checkpoint4, torch.uint8,
                   LM_INT4_NAME, {}, "a float or int8 matrix", int4_metadata())


def _export(source, output, device, layout: str, holds, make_layout, quantize, stored: torch.dtype,
            lm_name: str, config: dict, expected: str, metadata: dict | None = None) -> Path:
    """The steps both exports share: refuse a source already in `layout` or an output that is
    the source, quantize the LM's linears in that layout, write it beside the source's files."""
    ckpt = read_lm_checkpoint(source)
    if holds(ckpt.tensors):
        raise CheckpointError(f"{ckpt.path}: already in the {layout} layout")
    out = Path(output)
    if out.resolve() == ckpt.root.resolve():
        raise CheckpointError(f"{out}: the output must not be the source checkpoint's directory")
    with torch.device("meta"):
        names = make_layout(MoshiLM(ckpt.cfg))
    tensors = quantize(ckpt.tensors, names, torch.device(device))
    missing = [n for n in names if tensors.get(n) is None or tensors[n].dtype != stored]
    if missing:
        raise CheckpointError(f"{ckpt.path}: key {missing[0]} is missing or not {expected}")
    meta = dict(ckpt.meta) or _config_of(ckpt)
    meta.pop("quantize", None)  # set again by the layout that has it (q8)
    meta.update(moshi_name=lm_name, **config)
    return _write(ckpt, out, lm_name, tensors, meta, metadata)


def _write(ckpt, out: Path, lm_name: str, tensors: dict, meta: dict, metadata: dict | None = None) -> Path:
    """The LM file `lm_name` and config.json naming it in `out`, and copies of the rest."""
    out.mkdir(parents=True, exist_ok=True)
    # Both or neither, with the user's usual file mode (safetensors' own is 0600).
    with OutputFiles(out / lm_name, out / "config.json") as written:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(written.temporary(out / lm_name)),
                  metadata=metadata)
        written.temporary(out / "config.json").write_text(json.dumps(meta, indent=2))
    for name in {*(meta.get(k, default) for k, default in _COPIED.items()), "mimi_config.json",
                 "diffuplex.safetensors"}:
        if (ckpt.root / name).is_file():
            shutil.copy2(ckpt.root / name, out / name)
    for extra in ("voices", "voices.tgz"):
        src = ckpt.root / extra
        if src.is_dir():
            shutil.copytree(src, out / extra, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, out / extra)
    return out / lm_name


def _config_of(ckpt) -> dict:
    from ..families.moshi.lm.lm_config import to_lm_kwargs

    return to_lm_kwargs(ckpt.cfg)
