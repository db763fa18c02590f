"""The installer build resolves the GPU support the installed app may fetch (the CUDA build of
torch, about 2.7 GB of wheels) on machines that have no GPU: it must read the wheels' metadata
over HTTP ranges, never download them. Run against a real index on loopback, with real pip."""
import hashlib
import os
import sys
import zipfile
from pathlib import Path

from tests.wheel_server import WheelServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packaging"))
from resolve_cuda_torch import resolve, unpacked_size  # noqa: E402

PAYLOAD = 24_000_000  # per large wheel: big enough that a download would show in the byte count


def _wheel(folder: Path, name: str, version: str, requires: list[str], payload: int) -> Path:
    stem = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name.replace('-', '_')}/blob.bin", os.urandom(payload), compress_type=zipfile.ZIP_STORED)
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
        wheel.writestr(f"{stem}.dist-info/METADATA", metadata)
        wheel.writestr(f"{stem}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{stem}.dist-info/RECORD", "")
    return path


def _index(root: Path, wheels: list[Path]) -> None:
    """A PEP 503 simple index: /simple/NAME/ links each wheel with its sha256, as PyPI's does."""
    for wheel in wheels:
        name = wheel.name.split("-")[0].replace("_", "-")
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        page.write_text(f'<html><body><a href="../../{wheel.name}#sha256={digest}">{wheel.name}</a></body></html>\n')


def test_the_gpu_manifest_is_resolved_without_downloading_the_wheels(tmp_path):
    wheels = [_wheel(tmp_path, "torch", "2.13.0", ["nvidia-big==1.0"], PAYLOAD),
              _wheel(tmp_path, "nvidia-big", "1.0", [], PAYLOAD),
              _wheel(tmp_path, "cuda-bindings", "13.0", [], 10_000)]
    _index(tmp_path, wheels)
    total = sum(w.stat().st_size for w in wheels)
    with WheelServer(tmp_path) as server:
        items = resolve("2.13.0", f"{server.url}/simple")
        resolved = server.sent
        sizes = {w.name: unpacked_size(f"{server.url}/{w.name}", w.stat().st_size) for w in wheels[:1]}
    assert sorted(i["metadata"]["name"] for i in items) == ["cuda-bindings", "nvidia-big", "torch"]
    assert all(i["download_info"]["archive_info"]["hashes"]["sha256"] for i in items)
    # Metadata and zip directories only: a few hundred kB at most, against about 48 MB of wheels.
    assert resolved < total / 50, f"pip fetched {resolved} of {total} bytes to resolve"
    assert sizes[wheels[0].name] > PAYLOAD
