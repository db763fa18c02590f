"""Writing a kept copy of quantized weights (engine.weights.int4_copies says where copies live and
what they record): whether one fits where it goes, and the write itself, all or nothing, each
tensor's checksum in its metadata (engine.weights.checksums). Used by every family's kept
copies: Moshi's int4 LM (engine.weights.int4_kept), MiniCPM-o's int8 and int4 products."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from safetensors.torch import save_file

from ..loading.library.progress import size_text
from .checksums import to_metadata
from .int4_copies import part_path, remove_leftovers

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


def write_copy(tensors: dict, copy: Path, metadata: dict[str, str]) -> None:
    """All or nothing: a temporary name beside the copy, synced, renamed into place. The
    metadata records each tensor's checksum."""
    part = part_path(copy)
    try:
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        save_file(tensors, str(part), metadata={**metadata, **to_metadata(tensors)})
        with open(part, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(part, copy)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
