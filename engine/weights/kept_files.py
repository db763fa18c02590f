"""Writing a kept copy of quantized weights (engine.weights.int4_copies says where copies live and
what they record): whether one fits where it goes, and the write itself, all or nothing, each
tensor's checksum in its metadata (engine.weights.checksums). Used by every family's kept
copies: Moshi's int4 LM (engine.weights.int4_kept), MiniCPM-o's int8 and int4 products."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path

import torch

from ..loading.library.progress import size_text
from .checksums import to_metadata
from .int4_copies import part_path, remove_leftovers

_NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
          torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
          torch.bool: "BOOL"}

log = logging.getLogger(__name__)
RESERVE_BYTES = 500 * 10**6
"""Free space a copy leaves on its disk: a cache of ours never fills the user's disk."""


def cannot_keep(copy: Path, need: int) -> str | None:
    """Why a copy of `need` bytes cannot be written at `copy` (the folder, the free space), or
    None. Crashed writes' leftovers and stale copies in its folder are removed first."""
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


def write_copy(tensors: dict[str, torch.Tensor], copy: Path, metadata: dict[str, str]) -> None:
    """All or nothing: a temporary name beside the copy, synced, renamed into place. The
    metadata records each tensor's checksum. Written in the safetensors layout one tensor at a
    time, each brought from its device alone: an 8B model's copy never sits whole in host memory
    (safetensors' own writer holds every tensor's bytes at once)."""
    part = part_path(copy)
    try:
        tensors = {k: v.detach().contiguous() for k, v in tensors.items()}  # no copy of contiguous ones
        header, offset = {"__metadata__": {**metadata, **to_metadata(tensors)}}, 0
        for key, tensor in tensors.items():
            size = tensor.numel() * tensor.element_size()
            header[key] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape),
                           "data_offsets": [offset, offset + size]}
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors' writer does
        with open(part, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for tensor in tensors.values():
                f.write(tensor.cpu().reshape(-1).view(torch.uint8).numpy())
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, copy)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise


def discard(copy: Path, why: str, quiet: bool = False) -> tuple[None, str]:
    """Removes a copy that is not to be read; returns None, and `why` where the user should hear
    of it (not `quiet`: a stale copy is replaced without a word)."""
    (log.info if quiet else log.warning)("%s: %s; discarded, it is made again", copy, why)
    try:
        copy.unlink(missing_ok=True)
    except OSError as exc:  # the new copy's rename says it again, and the load goes on in memory
        log.warning("%s: could not remove it (%s)", copy, exc.strerror or exc)
    return None, "" if quiet else why
