"""A repository's folder in the Hugging Face cache and what we keep track of in it: the
downloads left half-written there (`blobs/*.incomplete`), and the library entries it was
downloaded for (an int8 twin is downloaded for its bf16 entry). Plain files only: the
client is not imported."""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)
INCOMPLETE = ".incomplete"
_DOWNLOADED_FOR = ".duplexcadence-downloaded-for"
"""One entry name a line; the client's cache scan reads only snapshots/, refs/ and blobs/."""
_MAX_RECORD = 64 << 10


def repo_folder(cache_dir: str | Path, repo: str) -> Path:
    """`models--owner--name`, as the client names a model repository's folder."""
    return Path(cache_dir) / ("models--" + repo.replace("/", "--"))


def incomplete_blobs(folder: Path) -> list[Path]:
    """The half-written downloads in a repository's folder: `<etag>.incomplete` (the client 1.x,
    which resumes from it) or `<etag>.<id>.incomplete` (2.x, one per download)."""
    blobs = folder / "blobs"
    return sorted(blobs.glob("*" + INCOMPLETE)) if blobs.is_dir() else []


def being_written(folder: Path, incomplete: Path) -> bool:
    """Whether a live download (of any process) is writing `incomplete`: the client holds
    `.locks/<repo folder>/<etag>.lock` while it writes a blob, and the system lets go of
    that lock when the process ends, however it ends."""
    from filelock import FileLock, Timeout
    lock = folder.parent / ".locks" / folder.name / f"{incomplete.name.split('.')[0]}.lock"
    if not lock.exists():
        return False
    try:
        with FileLock(str(lock), timeout=0):
            return False
    except Timeout:
        return True


def remove_incomplete(folder: Path, finished_only: bool = False) -> int:
    """Deletes the half-written downloads in `folder` that no live download holds: all of them
    (the download was cancelled), or with `finished_only` those whose file is complete now
    (nothing resumes them). Returns the bytes freed."""
    freed = 0
    for path in incomplete_blobs(folder):
        if finished_only and not (path.parent / path.name.split(".")[0]).exists():
            continue  # still to be downloaded: a resume needs it
        if being_written(folder, path):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError as exc:
            log.info("%s: could not remove it (%s)", path, exc)
            continue
        log.info("%s: removed, a download left half-written", path)
        freed += size
    return freed


def downloaded_for(folder: Path) -> set[str]:
    """The library entries a repository was downloaded for (none recorded: an empty set)."""
    record = folder / _DOWNLOADED_FOR
    try:
        if record.stat().st_size > _MAX_RECORD:
            return set()
        return {line.strip() for line in record.read_text(encoding="utf-8").splitlines() if line.strip()}
    except (OSError, UnicodeDecodeError):
        return set()


def record_downloaded_for(folder: Path, names: set[str]) -> None:
    """Replaces the record (none left for an empty set); written whole or not at all."""
    record = folder / _DOWNLOADED_FOR
    if not names:
        record.unlink(missing_ok=True)
        return
    folder.mkdir(parents=True, exist_ok=True)
    part = record.with_name(f"{record.name}.{os.getpid()}.part")
    try:
        part.write_text("".join(f"{name}\n" for name in sorted(names)), encoding="utf-8")
        os.replace(part, record)
    finally:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
