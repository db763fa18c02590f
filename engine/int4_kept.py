"""Int4 weights quantized once and kept: an int4 load of a bf16 or q8 LM file reads the kept
copy of it (engine.int4_copies), or makes one with exactly the quantization a load would do
(engine.quant4's own functions) and then reads it. Where a copy cannot be kept (too little
free space, a folder that cannot be written), the LM is quantized in memory as before, with
a one-line warning for the log and the user."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from . import checkpoint
from .checkpoint import check_layout, read_safetensors
from .config.lm import LMConfig
from .errors import CheckpointError
from .int4_copies import SourceFile, copy_path, header_metadata, is_current, part_path, remove_leftovers
from .library.progress import size_text
from .lm.loader import build_lm, weights_choice
from .lm.moshi_lm import MoshiLM
from .quant4 import SCALE, int4_layout, int4_metadata, is_int4, quantize_checkpoint4

log = logging.getLogger(__name__)
RESERVE_BYTES = 500 * 10**6
"""Free space a copy leaves on its disk: a cache of ours never fills the user's disk."""
_HEADER_BYTES = 1 << 20


def load_kept_int4(cfg: LMConfig, tensors: dict, lm_path: Path, device: torch.device, dtype: torch.dtype
                   ) -> tuple[MoshiLM, str]:
    """The LM with int4 weights from a bf16 or q8 checkpoint's `tensors` (read from `lm_path`),
    and what the user should know about it ("" for nothing)."""
    choice = weights_choice(lm_path)  # build_lm says it only of the file it reads
    if choice:
        log.warning("%s", choice)
    source = SourceFile.of(lm_path)
    copy = copy_path(source, device.type)
    layout, names = _int4_module(cfg)
    lm = _read_copy(copy, source, cfg, device, dtype)
    if lm is not None:
        return lm, ""
    problem = _cannot_keep(copy, _file_bytes(layout, tensors))
    if problem is None:
        quantized = _quantize(tensors, names, device, lm_path.name)
        check_layout(layout, quantized, lm_path)  # a checkpoint that does not fit is named, never kept
        try:
            _write(quantized, copy, {**int4_metadata(), **source.metadata(), "quantized_on": device.type})
        except (OSError, SafetensorError) as exc:  # the disk filled meanwhile, a name in the way
            problem = f"writing {copy} failed ({getattr(exc, 'strerror', None) or exc})"
        del quantized
    if problem is not None:
        notice = f"{lm_path}: int4 weights not kept: {problem}; quantized in memory for this load"
        log.warning("%s", notice)
        # After a failed write this quantizes a second time: build_lm takes int4 tensors only
        # with the file whose metadata describes them.
        return build_lm(cfg, tensors, lm_path, device, dtype, "int4"), notice
    log.info("%s: quantized to int4 once, kept as %s", lm_path, copy)
    try:
        return build_lm(cfg, read_safetensors(copy), copy, device, dtype, "int4"), ""
    except CheckpointError as exc:  # the source's values (a NaN), found reading what was made of it
        message = str(exc).replace(f"{copy}: ", f"{lm_path}: ", 1)
    _discard(copy, "its first load failed")
    raise CheckpointError(message)


def _int4_module(cfg: LMConfig) -> tuple[MoshiLM, list[str]]:
    """The LM on the meta device in the int4 layout (its keys and shapes, allocating nothing),
    and the names of its quantized parameters, as build_lm quantizes them."""
    with torch.device("meta"):
        lm = MoshiLM(cfg)
    return lm, int4_layout(lm)


def _read_copy(copy: Path, source: SourceFile, cfg: LMConfig, device, dtype) -> MoshiLM | None:
    """The LM from the kept copy, or None where there is none to read: a stale one (its source
    changed, or another version's layout) or a broken one is discarded, logged."""
    if not copy.is_file():
        return None
    try:
        meta = header_metadata(copy)
    except (OSError, ValueError) as exc:
        return _discard(copy, f"not a readable safetensors file ({exc})")
    if not (is_current(meta) and meta.get("source") == str(source.path)):
        return _discard(copy, "made from an earlier version of the source file", quiet=True)
    if not {**int4_metadata(), "quantized_on": device.type}.items() <= meta.items():
        return _discard(copy, "made in another int4 layout", quiet=True)
    try:
        lm = _build_from(copy, cfg, device, dtype)
    except CheckpointError as exc:
        problem = str(exc).removeprefix(f"{copy}: ")
    else:
        log.info("%s: int4 weights read from the kept copy %s", source.path, copy)
        return lm
    # Discarded once its mapped tensors are gone with the failed call (Windows deletes no
    # mapped file).
    return _discard(copy, problem)


def _build_from(copy: Path, cfg: LMConfig, device, dtype) -> MoshiLM:
    tensors = read_safetensors(copy)
    if not is_int4(tensors):  # build_lm would quantize it, not read it
        raise CheckpointError(f"{copy}: holds no int4 weights")
    return build_lm(cfg, tensors, copy, device, dtype, "int4")  # the layout, keys and shapes checked


def _discard(copy: Path, why: str, quiet: bool = False) -> None:
    (log.info if quiet else log.warning)("%s: %s; discarded, it is made again", copy, why)
    try:
        copy.unlink(missing_ok=True)
    except OSError as exc:  # the new copy's rename says it again, and the load goes on in memory
        log.warning("%s: could not remove it (%s)", copy, exc.strerror or exc)


def _file_bytes(layout: MoshiLM, tensors: dict) -> int:
    """The size the copy will have: the layout's own tensors (integer weights, their scales)
    at their sizes, the rest as the checkpoint holds them."""
    total = _HEADER_BYTES
    for key, own in layout.state_dict(keep_vars=True).items():
        source = tensors.get(key)
        kept_as_is = source is not None and own.dtype.is_floating_point and not key.endswith(SCALE)
        total += source.nbytes if kept_as_is else own.nbytes
    return total


def _cannot_keep(copy: Path, need: int) -> str | None:
    """Why the copy cannot be written (the folder, the free space), or None."""
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot make the folder {copy.parent} ({exc.strerror or exc})"
    if not os.access(copy.parent, os.W_OK):
        return f"cannot write in {copy.parent}"
    remove_leftovers(copy.parent, keep=copy)
    free = shutil.disk_usage(copy.parent).free
    if free < need + RESERVE_BYTES:
        return (f"it needs {size_text(need)} and {copy.parent} has {size_text(free)} free "
                f"(a copy leaves {size_text(RESERVE_BYTES)})")
    return None


def _quantize(tensors: dict, names: list[str], device: torch.device, label: str) -> dict:
    """quantize_checkpoint4 a parameter at a time (it quantizes each one alone: the result is
    the same), reporting the checkpoint's bytes done through the load's progress
    (engine.reporting_progress)."""
    report = checkpoint.progress_callback()
    label = f"{label} → int4 (once, then kept)"
    sizes = [tensors[n].nbytes if n in tensors else 0 for n in names]
    done = 0
    for name, size in zip(names, sizes):
        tensors = quantize_checkpoint4(tensors, [name], device)
        done += size
        if report:
            report(label, done, sum(sizes))
    return tensors


def _write(tensors: dict, copy: Path, metadata: dict[str, str]) -> None:
    """All or nothing: a temporary name beside the copy, synced, renamed into place."""
    part = part_path(copy)
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(part), metadata=metadata)
        with open(part, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(part, copy)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
