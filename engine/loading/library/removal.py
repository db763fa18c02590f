"""Removing a model from this machine: its repository's own folder in the Hugging Face cache
(never by commit: two repositories can share one, as a duplicated repository does), its int8
twin's when the twin was downloaded for it alone, and the int4 copies kept of their files.
The bytes it reports are those measured gone."""
from __future__ import annotations

import dataclasses
import logging
import os
import stat
from pathlib import Path

from ...errors import HubError
from ...weights.int4_copies import kept_copies, remove_copies
from .cache_layout import being_written, downloaded_for, incomplete_blobs, record_downloaded_for, repo_folder
from .catalogue import KNOWN

log = logging.getLogger(__name__)


def remove_model(name: str, cache_dir: str | Path) -> int:
    """Deletes the cache folder of repository `name` (every revision, and downloads left
    half-written), its `-q8` twin's when it was downloaded for `name` and no other entry,
    and the int4 copies whose source files are gone with them. Returns the bytes freed: each
    file counted once, and only once nothing else still links it (a blob the client shares
    between repositories stays while another one uses it)."""
    cache_dir = Path(cache_dir)
    folders = [f for f in [repo_folder(cache_dir, name)] if f.is_dir()]
    twin = KNOWN[name].int8_repo if name in KNOWN else None
    twin_folder = repo_folder(cache_dir, twin) if twin else None
    if twin_folder is not None and name in (wanted := downloaded_for(twin_folder)):
        if wanted == {name}:
            folders.append(twin_folder)
        else:  # also downloaded for itself, or for another entry: it stays theirs
            record_downloaded_for(twin_folder, wanted - {name})
    if not folders:
        raise HubError(f"{name}: not in the Hugging Face cache at {cache_dir}")
    live = [p for f in folders for p in incomplete_blobs(f) if being_written(f, p)]
    if live:
        raise HubError(f"{name}: it is being downloaded (by another window or command); stop that download, then "
                       "remove it")
    files = _physical_files(folders)
    inside = [f.resolve() for f in folders]
    linked = {link for _, _, links in files.values() for link in links}
    copies = [c for c in kept_copies() if any(c.source.is_relative_to(f) for f in inside) or c.source in linked]
    _delete(folders, cache_dir)
    # A file is freed once no path to it is left, in the folders or (a hard link) anywhere else.
    freed = sum(size for size, nlink, links in files.values()
                if nlink <= len(links) and not any(os.path.lexists(link) for link in links))
    left = [next(f.rglob("*"), f) for f in folders if f.exists()]
    try:
        freed += remove_copies([c for c in copies if not c.source.exists()])
    except OSError as exc:
        raise HubError(f"{name}: {exc}") from None
    if left:
        raise HubError(f"{name}: could not remove all of its files (in use, or no permission), e.g. {left[0]}")
    log.info("removed %s (%s): %d bytes freed", name, ", ".join(str(f) for f in folders), freed)
    return freed


def _physical_files(folders: list[Path]) -> dict[tuple[int, int], tuple[int, int, list[Path]]]:
    """Every file whose bytes the folders hold or link, by (device, inode): its size, its link
    count, and the paths to it found in them. A blob linked from the client's cache-wide shared
    store (`cache_dir/blobs`) is counted as that store's file."""
    found: dict[tuple[int, int], tuple[int, int, list[Path]]] = {}
    inside = [f.resolve() for f in folders]
    for folder in folders:
        for root, _, names in os.walk(folder):
            for entry in names:
                path = Path(root) / entry
                try:
                    st = path.lstat()
                    if stat.S_ISLNK(st.st_mode):
                        target = path.resolve()
                        # Snapshot links point at the folder's own blobs, which the walk finds.
                        if any(target.is_relative_to(f) for f in inside) or not target.is_file():
                            continue
                        path, st = target, target.stat()
                    elif not stat.S_ISREG(st.st_mode):
                        continue
                except OSError:
                    continue
                _, _, links = found.setdefault((st.st_dev, st.st_ino), (st.st_size, st.st_nlink, []))
                if path not in links:
                    links.append(path)
    return found


def _delete(folders: list[Path], cache_dir: Path) -> None:
    """Through the client's own deletion, which also collects a shared blob once no repository
    links it (client 2.x; 1.x has no shared store). It logs what it could not delete and goes on."""
    from huggingface_hub import DeleteCacheStrategy
    fields = {f.name for f in dataclasses.fields(DeleteCacheStrategy)}
    strategy = dict(expected_freed_size=0, blobs=frozenset(), refs=frozenset(), repos=frozenset(folders),
                    snapshots=frozenset())
    if "cache_dir" in fields:
        strategy["cache_dir"] = cache_dir
    DeleteCacheStrategy(**strategy).execute()
