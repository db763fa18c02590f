"""Outputs written all or nothing: each file goes to a unique temporary name beside it and is
renamed into place only when every file of the set is complete, so an existing file survives
any failure. Two renames are not one atomic step: the set is locked while it is written (a
second job on the same output refuses at once, naming it), and the files it replaces are kept
under a second name until all of it is in place, so a rename failing midway puts them back.
An output given as a link is written through it: its target is locked and replaced, the link
kept. Holding an output's lock proves no live job is writing it, so the hidden files a killed
job left beside it (`.NAME.XXXXXXXX.part`, `.old`) are removed then."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import sys
from pathlib import Path

_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""How writers built in Rust (safetensors) show the OS error: they raise no OSError."""


class OutputError(OSError):
    """An output could not be written; the message names the file and why."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno N]"
        return self.strerror or super().__str__()


class OutputBusyError(OutputError):
    """Another job is writing the same output."""


class OutputFiles:
    """`with OutputFiles(a, b) as out:` write to `out.temporary(a)` and `out.temporary(b)`;
    leaving the block without an exception moves both into place, with one removes both."""

    def __init__(self, *targets: str | Path):
        self.targets = [Path(t) for t in targets]
        # What each name leads to (links followed): the file locked, written beside and replaced.
        self._real = {target: real_file(target) for target in self.targets}
        for i, target in enumerate(self.targets):
            for other in self.targets[:i]:
                if same_file(target, other):
                    raise OutputError(errno.EINVAL, f"{target}: is the same file as {other}, another output "
                                                    "of this job; give each output its own file")
        self._temporary: dict[Path, tuple[Path, int]] = {}  # target -> (temporary, its mode)
        self._locks: list[_Lock] = []

    def __enter__(self) -> OutputFiles:
        try:
            for target in sorted(self.targets, key=lambda t: str(self._real[t])):
                self._locks.append(_Lock(self._real[target], target))
                remove_leftovers(self._real[target])
        except BaseException:
            self._release()
            raise
        return self

    def temporary(self, target: str | Path) -> Path:
        """A new empty file beside `target`, created with the user's usual mode (the kernel
        applies the umask, as for any file they create), never an existing name."""
        target = Path(target)
        if target not in self.targets:
            raise ValueError(f"{target}: not one of this set's outputs")
        if target in self._temporary:  # asked again: the same file (another would be left behind)
            return self._temporary[target][0]
        real = self._real[target]
        while True:
            path = real.with_name(f".{real.name}.{secrets.token_hex(4)}.part")
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            except FileExistsError:
                continue
            self._temporary[target] = (path, os.stat(path).st_mode & 0o7777)
            return path

    def __exit__(self, kind, exc, tb) -> None:
        failure = exc
        if failure is None:
            try:
                self._commit()
            except BaseException as raised:
                failure = raised
        if failure is not None:
            for path, _ in self._temporary.values():
                path.unlink(missing_ok=True)
        self._release()
        if failure is None:
            return
        explained = self._explained(failure)
        if explained is not failure:
            raise explained from None
        if failure is not exc:
            raise failure

    def _commit(self) -> None:
        for path, mode in self._temporary.values():
            # A writer that made its own temporary file (safetensors) leaves it 0600.
            if os.stat(path).st_mode & 0o7777 != mode:
                os.chmod(path, mode)
            _sync(path)  # on disk before it replaces the old file: a power cut keeps one of them
        kept: dict[Path, Path | None] = {}  # target -> its previous file under a second name
        try:
            for target, (path, _) in self._temporary.items():
                kept[target] = _keep(self._real[target])
                os.replace(path, self._real[target])
        except BaseException:
            for target, old in kept.items():  # the set as it was
                if old is not None:
                    os.replace(old, self._real[target])
                elif target not in self._temporary or not self._temporary[target][0].exists():
                    self._real[target].unlink(missing_ok=True)
            raise
        for old in kept.values():
            if old is not None:
                old.unlink(missing_ok=True)

    def _explained(self, exc: BaseException) -> BaseException:
        """A full disk as "no space left on DEVICE writing FILE"; any other OS error on a
        temporary file as the same error on the output it stands for (its name means nothing
        to the user)."""
        code = exc.errno if isinstance(exc, OSError) else _rust_errno(exc)
        mine = self._target_of(getattr(exc, "filename", None))
        if code in _NO_SPACE:
            # Errors that do not say where (safetensors') come from the last output begun.
            target = mine or next(reversed(self._temporary), self.targets[-1])
            return OutputError(code, f"no space left on {device_of(self._real[target])} writing {target}")
        if isinstance(exc, OSError) and mine is not None:
            return OutputError(code, f"{mine}: {exc.strerror or exc}")
        return exc

    def _target_of(self, filename) -> Path | None:
        """The output whose temporary file `filename` is, if it is one."""
        for target, (path, _) in self._temporary.items():
            if filename is not None and Path(filename) == path:
                return target
        return None

    def _release(self) -> None:
        while self._locks:
            self._locks.pop().release()


def _rust_errno(exc: BaseException) -> int | None:
    found = _RUST_OS_ERROR.search(str(exc))
    return int(found.group(1)) if found else None


def real_file(path: str | Path) -> Path:
    """The file `path` names, links followed (also a link to a file not made yet), as an
    absolute path; OutputError for a loop of links."""
    real = Path(os.path.realpath(path))
    if real.is_symlink():  # realpath stops at a link only when the links go round
        raise OutputError(errno.ELOOP, f"{path}: a loop of links (it leads back to itself); give a file name")
    return real


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` are one file, whatever their spelling: the same device and inode
    (links, hard links and relative spellings included); for a name whose file does not exist
    yet, the same path once links are followed. "-" is standard input."""
    identities = []
    for path in (a, b):
        try:
            st = os.fstat(0) if str(path) == "-" else os.stat(path)
            identities.append((st.st_dev, st.st_ino))
        except OSError:
            identities.append(os.path.realpath(path))
    return identities[0] == identities[1]


def check_distinct(inputs: dict[str, str | Path | None], outputs: dict[str, str | Path | None]) -> None:
    """OutputError, before any work, when an output is one of the job's inputs (writing it
    would replace what the job reads) or two outputs are one file (see same_file). The keys
    name the options, as the user gave them (e.g. "--input"); None values, and inputs that are
    no file (a model given by name), are left out."""
    given_in = [(name, path) for name, path in inputs.items()
                if path is not None and (str(path) == "-" or os.path.exists(path))]
    given_out = [(name, path) for name, path in outputs.items() if path is not None]
    for i, (name, path) in enumerate(given_out):
        for other, source in given_in:
            if same_file(path, source):
                raise OutputError(errno.EINVAL, f"{path}: {name} is the same file as {other} {source} (writing it "
                                                f"would replace the input); choose another {name.lstrip('-')}")
        for other, earlier in given_out[:i]:
            if same_file(path, earlier):
                raise OutputError(errno.EINVAL, f"{path}: {name} is the same file as {other} {earlier}; give "
                                                "each its own file")


_LEFTOVER = r"\.[0-9a-f]{8}\.(?:part|old)"


def remove_leftovers(real: Path) -> None:
    """The temporary and kept files a killed job left beside `real`; called with its lock
    held (they are only made under it, so no live job owns them)."""
    pattern = re.compile(re.escape(f".{real.name}") + _LEFTOVER)
    try:
        names = os.listdir(real.parent)
    except OSError:
        return
    for name in names:
        if pattern.fullmatch(name):
            with contextlib.suppress(OSError):
                os.unlink(real.parent / name)


def _keep(target: Path) -> Path | None:
    """A second name (a hard link) for `target`'s file, while a set replaces it; None when there
    is no file, or the file system has no hard links (then a failure midway cannot undo it)."""
    if not target.exists():
        return None
    old = target.with_name(f".{target.name}.{secrets.token_hex(4)}.old")
    try:
        os.link(target, old)
    except OSError:
        return None
    return old


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY if sys.platform != "win32" else os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def device_of(path: Path) -> str:
    """The file system `path` is on, as the user knows it: its device and mount point where
    the system lists them (Linux), else the mount point."""
    mount = Path(os.path.abspath(path)).parent
    while not os.path.ismount(mount) and mount.parent != mount:
        mount = mount.parent
    found = None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as table:
            for line in table:
                source, point = line.split()[:2]
                if point == str(mount):
                    found = source  # the last one: a later mount hides an earlier one
    except OSError:
        pass
    return f"{found} (mounted at {mount})" if found else str(mount)

class _Lock:
    """An exclusive lock on `.NAME.lock` beside the file `real` (an output's, links followed:
    every name for it shares the lock), held until release; the kernel drops it if the process
    dies, so a crash never leaves the output locked. `target`: the name errors give."""

    def __init__(self, real: Path, target: Path):
        self.path = real.with_name(f".{real.name}.lock")
        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o666)
            if not _try_lock(fd):
                os.close(fd)
                raise OutputBusyError(errno.EBUSY, f"{target}: another job is writing it (its lock {self.path.name} "
                                                   f"is held); wait for it to finish or choose another output")
            # The holder before us may have removed the file after we opened it: a lock on a
            # removed file locks nothing, so take it again on the file now there.
            try:
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino or sys.platform == "win32":
                    self._fd = fd
                    return
            except FileNotFoundError:
                pass
            os.close(fd)

    def release(self) -> None:
        if sys.platform == "win32":  # an open file cannot be removed there
            os.close(self._fd)
            with contextlib.suppress(OSError):  # another job has it open: it removes it
                self.path.unlink()
            return
        self.path.unlink(missing_ok=True)  # while still locked, so no one else holds it
        os.close(self._fd)


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":
        import msvcrt
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
