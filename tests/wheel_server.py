"""A real HTTP server on loopback that serves wheel files with range requests, as PyPI's file
host does, and can drop a connection part-way (to test resuming), plus real wheels to serve."""
from __future__ import annotations

import hashlib
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from app.cuda_torch import Manifest, WheelFile


def make_wheel(folder: Path, package: str, payload_bytes: int = 300_000) -> Path:
    """A wheel with a package, a file under .data/purelib, an executable, and its dist-info."""
    path = folder / f"{package}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{package}/__init__.py", f"NAME = {package!r}\n")
        # Incompressible-ish payload, so the file is large enough to interrupt mid-way.
        wheel.writestr(f"{package}/blob.bin", hashlib.sha256(package.encode()).digest() * (payload_bytes // 32),
                       compress_type=zipfile.ZIP_STORED)
        wheel.writestr(f"{package}-1.0.data/purelib/{package}_extra.py", "EXTRA = True\n")
        wheel.writestr(f"{package}-1.0.data/scripts/{package}-tool", "#!/bin/sh\n")
        tool = zipfile.ZipInfo(f"{package}/bin/tool")
        tool.external_attr = 0o100755 << 16
        wheel.writestr(tool, "#!/bin/sh\necho tool\n")
        wheel.writestr(f"{package}-1.0.dist-info/METADATA", f"Name: {package}\nVersion: 1.0\n")
    return path


class WheelServer:
    """Serves the files of `folder`. `drop_after`: bytes after which the next GET of a file is
    cut off (once). `ranges` records the Range header of every GET."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.drop_after: int | None = None
        self.ranges: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                path = server.folder / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                header = self.headers.get("Range")
                server.ranges.append(header)
                start = int(header.removeprefix("bytes=").split("-")[0]) if header else 0
                self.send_response(206 if header else 200)
                if header:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if server.drop_after is not None:
                    body, server.drop_after = body[:server.drop_after], None
                    self.wfile.write(body)
                    self.wfile.flush()
                    self.connection.shutdown(2)  # the connection drops mid-file
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> WheelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def manifest(self, wheels: list[Path]) -> Manifest:
        files = [WheelFile(name=w.name, url=f"{self.url}/{w.name}", sha256=hashlib.sha256(w.read_bytes()).hexdigest(),
                           size=w.stat().st_size) for w in wheels]
        return Manifest(torch="2.13.0", cuda="13.0", python="cp311", platform="linux_x86_64", files=files,
                        installed_bytes=sum(w.stat().st_size for w in wheels))
