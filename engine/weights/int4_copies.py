"""The quantized copies we keep of weight files, each made on the first load in its format (Moshi's
int4 LMs: engine.weights.int4_kept; MiniCPM-o's int8 and int4 products: its kept_weights): where
they live, which source each was made from, and removing them. Torch-free: the model list reads it.

One copy per source, format and device type, in `user_cache_dir()/int4` (named before int8 copies
existed), named by the source's resolved path (a Hub snapshot's file resolves to its sha256-named
blob) and the device type: a GPU's sums may round otherwise than the CPU's. Its metadata records
the source's path, size and modification time, the device type, the layout's metadata, the copy
format's version and each tensor's checksum (engine.weights.checksums, compared as it is read); a
copy whose record does not match is stale and never read. A copy is written under a temporary
name in the same folder and renamed into place, so a copy's name never holds a half-written file."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import time
from pathlib import Path

from ..config.checks import parse_json
from ..files.paths import user_cache_dir

log = logging.getLogger(__name__)
SUFFIX = ".int4.safetensors"
SUFFIXES = {"int4": SUFFIX, "int8": ".int8.safetensors"}
"""A copy's name ends in its format's (Moshi keeps int4 LMs, MiniCPM-o int8 and int4 products)."""
PART_SUFFIX = ".part"
LEFTOVER_S = 3600
"""A temporary file this old is a crashed write's leftover (a live write keeps touching its own)."""
_MAX_HEADER = 100 << 20
COPY_FORMAT = "2"
"""The metadata's "copy_format": raised when what a copy records changes (2: each tensor's
checksum), so that a copy made by an earlier version is made again, never read unchecked."""


def copies_folder() -> Path:
    return user_cache_dir() / "int4"


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """An LM file as a copy records it: resolved path, size and modification time."""
    path: Path
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str | Path) -> SourceFile:
        """Raises OSError when the file cannot be read."""
        resolved = Path(path).resolve()
        st = resolved.stat()
        return cls(resolved, st.st_size, st.st_mtime_ns)

    def metadata(self) -> dict[str, str]:
        return {"source": str(self.path), "source_size": str(self.size), "source_mtime_ns": str(self.mtime_ns)}


@dataclasses.dataclass(frozen=True)
class KeptCopy:
    path: Path
    source: Path
    size_on_disk: int
    current: bool
    """The source is there, unchanged since the copy was made."""
    device_type: str
    """Where it was quantized ("cpu", "cuda"): what loading on that kind of device reads."""
    weights: str = "int4"
    """Its format (SUFFIXES)."""


def copy_path(source: SourceFile, device_type: str, folder: Path | None = None, weights: str = "int4") -> Path:
    """Where the copy of `source` quantized to `weights` on `device_type` lives: a readable label
    (the repository's cache folder, or the checkpoint's folder), a digest of the resolved path,
    the device type, the format's suffix."""
    parent = source.path.parent
    label = parent.parent.name if parent.name == "blobs" else f"{parent.name}-{source.path.stem}"
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:80] or "lm"
    digest = hashlib.sha256(str(source.path).encode()).hexdigest()[:16]
    return (folder or copies_folder()) / f"{label}-{digest}.{re.sub(r'[^a-z0-9]+', '', device_type)}{SUFFIXES[weights]}"


def part_path(copy: Path) -> Path:
    """A temporary name beside `copy`, unique to this writer."""
    return copy.with_name(f".{copy.name}.{os.getpid()}.{time.monotonic_ns()}{PART_SUFFIX}")


def read_header(path: Path) -> dict:
    """A safetensors file's header (8 bytes of length, then JSON: each tensor's dtype and shape,
    and "__metadata__"), without torch. Raises OSError or ValueError for a file that is not one."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if not 2 <= length <= _MAX_HEADER:
            raise ValueError(f"header length {length} is not a safetensors header's")
        header = parse_json(f.read(length).decode("utf-8"), str(path))  # nesting bounded: no RecursionError
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header


def header_metadata(path: Path) -> dict:
    """A safetensors file's metadata ({} without any); raises as read_header does."""
    meta = read_header(path).get("__metadata__")
    return meta if isinstance(meta, dict) else {}


def is_current(meta: dict) -> bool:
    """Whether a copy's metadata is in this version's format and the source it records is
    there, unchanged."""
    if meta.get("copy_format") != COPY_FORMAT:
        return False
    try:
        source = SourceFile.of(meta["source"])
    except (KeyError, OSError, TypeError):
        return False
    return source.metadata().items() <= meta.items()


def kept_copies(folder: Path | None = None) -> list[KeptCopy]:
    """Every copy in the folder; files that are no copy of ours are left out (and left alone)."""
    folder = folder or copies_folder()
    found = []
    paths = sorted(p for suffix in SUFFIXES.values() for p in folder.glob("*" + suffix)) if folder.is_dir() else ()
    for path in paths:
        weights = next(w for w, suffix in SUFFIXES.items() if path.name.endswith(suffix))
        try:
            meta, size = header_metadata(path), path.stat().st_size
        except (OSError, ValueError) as exc:
            log.info("%s: not a readable int4 copy (%s)", path, exc)
            continue
        if isinstance(meta.get("source"), str):
            found.append(KeptCopy(path, Path(meta["source"]), size, is_current(meta), str(meta.get("quantized_on")),
                                  weights))
    return found


def copies_of(lm_file: Path, folder: Path | None = None) -> list[KeptCopy]:
    """The current copies kept of an LM file (one per device type it was loaded on)."""
    try:
        source = SourceFile.of(lm_file)
    except OSError:
        return []
    return [c for c in kept_copies(folder) if c.current and c.source == source.path
            and c.path == copy_path(source, c.device_type, folder, c.weights)]


def copies_under(source_folder: Path, folder: Path | None = None) -> list[KeptCopy]:
    """The copies made from files inside `source_folder` (a repository's cache folder)."""
    inside = Path(source_folder).resolve()
    return [c for c in kept_copies(folder) if c.source.is_relative_to(inside)]


def remove_copies(copies: list[KeptCopy]) -> int:
    """Deletes them; returns the bytes freed. Raises OSError naming the copy left."""
    freed = 0
    for copy in copies:
        try:
            copy.path.unlink(missing_ok=True)
        except OSError as exc:
            raise OSError(f"could not remove its int4 copy {copy.path} ({exc.strerror or exc})") from None
        freed += copy.size_on_disk
    return freed


def remove_leftovers(folder: Path | None = None, keep: Path | None = None) -> None:
    """Crashed writes' temporary files, and copies whose source is gone or changed (`keep`, the
    copy about to be replaced, is left to its rename). Each removal is logged."""
    folder = folder or copies_folder()
    if not folder.is_dir():
        return
    now = time.time()
    parts = [p for suffix in SUFFIXES.values() for p in folder.glob(f".*{suffix}.*{PART_SUFFIX}")]
    for part in parts:
        try:
            if now - part.stat().st_mtime > LEFTOVER_S:
                part.unlink()
                log.info("%s: removed, an int4 copy left half-written", part)
        except OSError as exc:
            log.info("%s: could not remove it (%s)", part, exc)
    for copy in kept_copies(folder):
        if not copy.current and copy.path != keep:
            try:
                copy.path.unlink()
                log.info("%s: removed, its source %s is gone or changed", copy.path, copy.source)
            except OSError as exc:
                log.info("%s: could not remove it (%s)", copy.path, exc)
