"""GPU support for the installed app: the installers carry the CPU build of torch (a lean
download for everyone); on a machine with an NVIDIA GPU the app offers to fetch the CUDA
build of the same torch release from PyPI, once, into the user's data folder, and puts it
ahead of the bundled build on the next start (packaging/README.md: the sizes and why).

What to fetch is a manifest resolved when the installer is built
(packaging/resolve_cuda_torch.py): every wheel's URL, size and SHA-256, so the size is
known before anything is downloaded and every byte is checked. Downloads resume from where
they stopped. Nothing here imports torch or Qt: the runtime hook calls `activate_installed`
before anything else runs, and the GUI drives `CudaTorchInstaller` from a thread.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .wheel_fetch import CHUNK, Cancelled, NotTheFile, ProgressFn, RangeRefused, download, starts_as_wheel

log = logging.getLogger("duplexcadence.gpu_support")

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "assets" / "cuda_torch.json"  # written by packaging/resolve_cuda_torch.py


def data_dir() -> Path:
    """Where fetched GPU support lives: per user, outside the (read-only) installation."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "DuplexCadence" / "gpu-support"


@dataclass(frozen=True)
class WheelFile:
    name: str
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    torch: str             # the torch release, the same as the bundled CPU build's
    cuda: str              # the CUDA release it is built with, e.g. "13.0"
    python: str            # the wheels' Python tag, e.g. "cp311"
    platform: str          # e.g. "manylinux_2_28_x86_64"
    files: list[WheelFile]
    installed_bytes: int   # measured: the unpacked size on disk

    @property
    def download_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def key(self) -> str:
        return f"torch-{self.torch}-cu{self.cuda.replace('.', '')}-{self.python}-{self.platform}"

    @property
    def driver_cuda_needed(self) -> tuple[int, int]:
        """CUDA's minor-version compatibility: a driver of the same major release runs it."""
        return int(self.cuda.split(".")[0]), 0


def load_manifest(path: Path | None = None) -> Manifest | None:
    """The bundled manifest, or None where there is none (a checkout; macOS)."""
    path = path or MANIFEST
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Manifest(torch=data["torch"], cuda=data["cuda"], python=data["python"], platform=data["platform"],
                    files=[WheelFile(**f) for f in data["files"]], installed_bytes=data["installed_bytes"])


def install_dir(manifest: Manifest) -> Path:
    return data_dir() / manifest.key


def is_installed(manifest: Manifest) -> bool:
    return (install_dir(manifest) / "installed.json").is_file()


def activate_installed() -> bool:
    """In an installed (frozen) app, put fetched GPU support first on the import path.
    True when it did. A checkout uses whatever torch its environment has."""
    if not getattr(sys, "frozen", False):
        return False
    manifest = load_manifest()
    if manifest is None or not is_installed(manifest):
        return False
    site = str(install_dir(manifest) / "site")
    if site not in sys.path:
        sys.path.insert(0, site)
    return True


def c_compiler() -> str | None:
    """Triton, which runs our GPU kernels, builds a small C launcher for them with the system's
    C compiler the first time they run: GPU support needs one."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")


def gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


# --- the GPU, seen through the driver alone (no CUDA build of torch is needed) -------------
@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    driver_cuda: tuple[int, int]  # the newest CUDA release the installed driver runs

    @property
    def driver_cuda_text(self) -> str:
        return f"{self.driver_cuda[0]}.{self.driver_cuda[1]}"


@functools.cache  # the window, the offer and the loader all ask; the driver is asked once
def find_nvidia_gpu() -> NvidiaGpu | None:
    """The first NVIDIA GPU the driver reports, or None (no driver, no GPU, driver error)."""
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    for libname in names:
        try:
            cuda = ctypes.CDLL(libname)
            break
        except OSError:
            continue
    else:
        return None
    version, count, device = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    name = ctypes.create_string_buffer(256)
    if (cuda.cuInit(0) != 0 or cuda.cuDriverGetVersion(ctypes.byref(version)) != 0
            or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1
            or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0
            or cuda.cuDeviceGetName(name, len(name), device) != 0):
        return None
    return NvidiaGpu(name.value.decode(errors="replace"), (version.value // 1000, version.value % 1000 // 10))


# --- fetching and unpacking --------------------------------------------------------------
class CudaTorchInstaller:
    """Downloads the manifest's wheels into `downloads/` (resuming `.part` files with HTTP
    range requests, app/gpu/wheel_fetch.py), checks each one's SHA-256 (a file found there too),
    unpacks them into a staging folder and renames it into place, so a half-done install is
    never taken for a finished one."""

    def __init__(self, manifest: Manifest, target: Path | None = None, timeout: float = 30.0):
        self.manifest = manifest
        self.target = target or install_dir(manifest)
        self.downloads = self.target.parent / "downloads"
        self.timeout = timeout
        self.cancel_event = threading.Event()

    def cancel(self) -> None:
        self.cancel_event.set()

    def downloaded_bytes(self) -> int:
        """What is already on disk (finished files and partial ones): what a resume skips."""
        done = 0
        for wheel in self.manifest.files:
            for path in (self.downloads / wheel.name, self.downloads / (wheel.name + ".part")):
                if path.is_file():
                    done += min(path.stat().st_size, wheel.size)
        return done

    def run(self, progress: ProgressFn = lambda done, total: None) -> Path:
        """Fetch, check and unpack; returns the install folder. Raises OfflineError,
        Cancelled, or OSError/ValueError naming the file that is wrong."""
        self.downloads.mkdir(parents=True, exist_ok=True)
        total = self.manifest.download_bytes
        done_before = 0
        for wheel in self.manifest.files:
            self._fetch(wheel, lambda n, _size, base=done_before: progress(base + n, total))
            done_before += wheel.size
        progress(total, total)
        self._unpack()
        return self.target

    def _fetch(self, wheel: WheelFile, progress: ProgressFn) -> None:
        final = self.downloads / wheel.name
        if final.is_file():  # checked like a fresh download: it may be another file of that size
            if final.stat().st_size == wheel.size and sha256_of(final) == wheel.sha256:
                progress(wheel.size, wheel.size)
                return
            log.info("%s: not the manifest's file, downloading it again", final)
            final.unlink()
        part = self.downloads / (wheel.name + ".part")
        have = part.stat().st_size if part.is_file() else 0
        if have > wheel.size or (have and not starts_as_wheel(part)):  # e.g. an HTML page kept before
            part.unlink()
            have = 0
        if have < wheel.size:
            fetch = functools.partial(download, wheel.url, wheel.size, part, cancel_event=self.cancel_event,
                                      timeout=self.timeout, progress=progress)
            try:
                fetch(have=have)
            except RangeRefused as refused:
                part.unlink()
                if refused.total not in (None, wheel.size):
                    raise NotTheFile(f"{wheel.url}: the server's file is {refused.total} bytes, the manifest "
                                     f"says {wheel.size}; the partial download was discarded") from None
                log.info("%s: the server refused to resume from byte %d, starting again", wheel.name, have)
                fetch(have=0)  # once, without a range: a second 416 cannot come
        digest = sha256_of(part)
        if digest != wheel.sha256:
            part.unlink()  # a corrupt file must not be resumed
            raise ValueError(f"{wheel.name}: its SHA-256 is {digest}, the manifest says {wheel.sha256}; "
                             "the download was discarded, try again")
        part.replace(final)

    def _unpack(self) -> None:
        staging = self.target.with_name(self.target.name + ".staging")
        shutil.rmtree(staging, ignore_errors=True)
        site = staging / "site"
        site.mkdir(parents=True)
        for wheel in self.manifest.files:
            if self.cancel_event.is_set():
                raise Cancelled()
            unpack_wheel(self.downloads / wheel.name, site)
        (staging / "installed.json").write_text(json.dumps(
            {"key": self.manifest.key, "files": [f.name for f in self.manifest.files]}, indent=1))
        shutil.rmtree(self.target, ignore_errors=True)
        staging.replace(self.target)
        shutil.rmtree(self.downloads, ignore_errors=True)  # the wheels are unpacked: free the space
        log.info("GPU support installed in %s", self.target)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def unpack_wheel(wheel: Path, site: Path) -> None:
    """A wheel's importable files into `site`, as pip lays them out: the package folders and
    the `.data/purelib` and `.data/platlib` trees; scripts and headers are not needed. Unix
    permission bits are kept (Triton's ptxas must stay executable)."""
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.infolist():
            name = entry.filename
            first, _, rest = name.partition("/")
            if first.endswith(".data"):
                kind, _, rest = rest.partition("/")
                if kind not in ("purelib", "platlib") or not rest:
                    continue
                name = rest
            target = (site / name).resolve()
            if not target.is_relative_to(site.resolve()):
                raise ValueError(f"{wheel.name}: entry {entry.filename} points outside the install folder")
            if entry.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(entry) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            mode = entry.external_attr >> 16
            if mode & 0o111:
                target.chmod(0o755)


def why_this_device(device: str) -> str:
    """Why the engine runs where it does, in words for the window (imports torch: call it
    where the engine is loaded, not on the GUI thread)."""
    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    if torch.cuda.is_available():
        return "CPU, as asked (a CUDA GPU is available)"
    if torch.version.cuda is not None:
        return "CPU: this PyTorch is a CUDA build, but no usable NVIDIA GPU was found (driver or device missing)"
    gpu = find_nvidia_gpu()
    if gpu is None:
        return "CPU: no NVIDIA GPU found"
    if not getattr(sys, "frozen", False):
        return (f"CPU: {gpu.name} found, but this environment's PyTorch is its CPU build "
                "(DUPLEXCADENCE_TORCH=cuda bash packaging/install.sh installs the CUDA build)")
    manifest = load_manifest()
    if manifest is not None and gpu.driver_cuda < manifest.driver_cuda_needed:
        return (f"CPU: {gpu.name} found, but its driver runs CUDA up to {gpu.driver_cuda_text} and GPU support "
                f"needs CUDA {manifest.cuda}: update the NVIDIA driver")
    return f"CPU: {gpu.name} found; install GPU support (Help menu) to use it"
