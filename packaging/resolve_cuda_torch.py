"""Resolves the GPU support the installed app may fetch (app/gpu/cuda_torch.py): the CUDA build of
the torch release this environment bundles, with everything it needs, for this Python and
platform, from PyPI (or --index-url, e.g. PyTorch's own index for Windows). Writes a manifest:
each wheel's URL, SHA-256 and size, and the unpacked size read from the wheels' zip
directories over HTTP ranges, so the app can state both before downloading a byte.

    python packaging/resolve_cuda_torch.py build/cuda_torch.json
"""
from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

# Our GPU path also maps memory through the CUDA driver's bindings (the `gpu` extra).
EXTRA_REQUIREMENTS = ["cuda-bindings"]
CUDA_PIN = r"(?:nvidia-cuda-runtime(?:-cu\d+)?|cuda-toolkit(?:\[[^\]]*\])?)\s*==\s*(\d+)\.(\d+)"


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests: enough for
    zipfile to read a wheel's central directory without downloading the wheel."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.pos = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
        self.pos += len(data)
        return data


def content_length(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as response:
        return int(response.headers["Content-Length"])


def unpacked_size(url: str, size: int) -> int:
    with zipfile.ZipFile(HttpRangeFile(url, size)) as archive:
        return sum(info.file_size for info in archive.infolist())


# pip's dry run downloads every wheel it resolves (the CUDA build: about 2.7 GB) unless it reads
# their metadata over HTTP ranges (fast-deps), which from this release on needs no download.
FAST_DEPS_PIP = (26, 0)


def resolve(torch_version: str, index_url: str) -> list[dict]:
    """pip's resolver, in report-only mode, for this interpreter and platform, seeing only
    `index_url` (the machine's own pip configuration, e.g. local mirrors, is ignored)."""
    pip = tuple(int(part) for part in re.findall(r"\d+", importlib.metadata.version("pip"))[:2])
    if pip < FAST_DEPS_PIP:
        raise SystemExit(f"pip {'.'.join(map(str, pip))} in {sys.prefix} would download every CUDA wheel to read "
                         f"its dependencies: install pip>={'.'.join(map(str, FAST_DEPS_PIP))} there first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        # `===`: exactly this release, not a local build of it such as 2.13.0+cpu.
        subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
                        "--quiet", "--use-feature=fast-deps", "--only-binary", ":all:", "--index-url", index_url,
                        "--report", str(report),
                        f"torch==={torch_version}", *EXTRA_REQUIREMENTS], check=True, env=env)
        return json.loads(report.read_text())["install"]


def cuda_release(items: list[dict], local_version: str) -> str:
    """The CUDA release torch was built with: from its pinned CUDA requirement (the runtime
    wheel in older releases, the `cuda-toolkit` metapackage in newer ones), or, for a wheel
    that carries its CUDA libraries itself (PyTorch's own index), from its label (cu130: 13.0)."""
    torch_item = next(i for i in items if i["metadata"]["name"] == "torch")
    for requirement in torch_item["metadata"].get("requires_dist", []):
        found = re.match(CUDA_PIN, requirement)
        if found:
            return f"{found[1]}.{found[2]}"
    label = re.fullmatch(r"cu(\d+)(\d)", local_version)
    if label:
        return f"{label[1]}.{label[2]}"
    raise SystemExit(f"torch {torch_item['metadata']['version']} from this index is not a CUDA build")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--index-url", default="https://pypi.org/simple")
    parser.add_argument("--local-version", default="",
                        help="the CUDA build's local version label where the index has one (cu130 on "
                             "PyTorch's index; PyPI's Linux wheels have none)")
    args = parser.parse_args()
    import sysconfig

    import torch

    version = torch.__version__.split("+")[0]
    items = resolve(version + (f"+{args.local_version}" if args.local_version else ""), args.index_url)
    files = []
    for item in items:
        url = item["download_info"]["url"]
        size = content_length(url)
        files.append({"name": url.rsplit("/", 1)[1].replace("%2B", "+"), "url": url,
                      "sha256": item["download_info"]["archive_info"]["hashes"]["sha256"], "size": size,
                      "unpacked": unpacked_size(url, size)})
        print(f"  {files[-1]['name']}: {size / 1e6:.0f} MB", file=sys.stderr)
    manifest = {
        "torch": version, "cuda": cuda_release(items, args.local_version),
        "python": f"cp{sys.version_info.major}{sys.version_info.minor}",
        "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        "installed_bytes": sum(f.pop("unpacked") for f in files),
        "files": files,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f["size"] for f in files)
    print(f"wrote {args.output}: torch {version} with CUDA {manifest['cuda']}, {len(files)} wheels, "
          f"{total / 1e9:.2f} GB to download, {manifest['installed_bytes'] / 1e9:.2f} GB unpacked", file=sys.stderr)


if __name__ == "__main__":
    main()
