"""The models already on this machine: complete or partly downloaded snapshots in the
Hugging Face cache, read with the client's own cache scan (removing them: removal.py)."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from ...config.checks import read_json
from ...errors import CheckpointError
from ...files.paths import LM_NAME, LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME
from .catalogue import KNOWN, needed_files

log = logging.getLogger(__name__)
# Names only duplex checkpoints use (many models ship a model.safetensors).
_OURS = {LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME}
TAIL_LISTED = "assets/token2wav"
"""A subfolder whose files a folder's listing includes (MiniCPM-o's tail, as its Hub repository holds it)."""


@dataclasses.dataclass(frozen=True)
class CachedModel:
    repo: str
    snapshot: Path
    complete: bool
    """Every file the loader needs is there; a partial one is finished by downloading again."""
    size_on_disk: int


def missing_files(folder: Path) -> list[str]:
    """What a checkpoint folder lacks of the official layout ([] when complete); a config.json
    naming files that cannot be its own makes it no model at all."""
    listing = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if (folder / TAIL_LISTED).is_dir():  # a family's files in a subfolder (MiniCPM-o's token2wav tail)
        listing |= {str(p.relative_to(folder)) for p in (folder / TAIL_LISTED).iterdir()}
    try:
        files = needed_files(listing, local_config(folder), None, str(folder), lambda name: _json_in(folder, name))
    except CheckpointError as exc:
        return [f"usable config.json ({exc})"]
    except ValueError as exc:
        if "not a duplex speech model" not in str(exc):
            return [f"usable config.json ({exc})"]
        files = [LM_NAME, MIMI_NAME, TOKENIZER_NAME]
    return [f for f in files if not (folder / f).exists()]


def _json_in(folder: Path, name: str) -> object:
    return read_json(folder / name) if (folder / name).is_file() else None


def local_config(folder: Path) -> dict | None:
    """A checkpoint folder's config.json, None without one; CheckpointError naming the file for
    one that cannot be read, or that is larger or nests deeper than a config may (the bounds
    of engine.config.checks)."""
    return read_json(folder / "config.json") if (folder / "config.json").exists() else None


def cached_models(cache_dir: str | Path) -> list[CachedModel]:
    """The duplex models in the cache (known repositories, or any holding a Mimi codec or an
    LM of the official names), newest revision first per repository."""
    from huggingface_hub import scan_cache_dir
    try:
        info = scan_cache_dir(cache_dir)
    except Exception as exc:  # no cache yet, or one the client cannot read: nothing cached
        log.info("no Hugging Face cache at %s (%s)", cache_dir, exc)
        return []
    found = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        # A complete revision first (the loader takes one), else the newest partial one.
        candidates = []
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            names = {f.file_name for f in rev.files}
            # Asking the Hub about a model caches its config.json (and an index): that alone is no download.
            known = repo.repo_id in KNOWN and any(name.endswith(".safetensors") for name in names)
            if known or names & _OURS:
                candidates.append(CachedModel(repo.repo_id, rev.snapshot_path, not missing_files(rev.snapshot_path),
                                              rev.size_on_disk))
        if candidates:
            found.append(max(candidates, key=lambda c: c.complete))
    return found
