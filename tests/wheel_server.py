"""A real HTTP server on loopback that serves wheel files with range requests, as PyPI's file
host does, and can drop a connection part-way (to test resuming), plus real wheels to serve."""
from __future__ import annotations

import hashlib
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from app.gpu.cuda_torch import Manifest, WheelFile


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


def _byte_range(header: str, size: int) -> tuple[int, int]:
    """[start, end) of a Range header's one range: "bytes=a-b", "bytes=a-" or "bytes=-n"."""
    first, _, last = header.removeprefix("bytes=").partition("-")
    if not first:
        return max(0, size - int(last)), size
    return int(first), min(size, int(last) + 1) if last else size


class WheelServer:
    """Serves the files of `folder`; a range starting past a file's end is answered 416, as
    RFC 9110 has it. `ranges` records the Range header of every GET, `paths` its path.
    Modes, for the ways a download goes wrong:
    `drop_after`: bytes after which the next GET of a file is cut off (once);
    `portal`: an HTML page every GET is answered with (a captive portal, an error page);
    `send_length`: False sends no Content-Length (the body ends when the connection closes);
    `refuse_ranges`: every range request is answered 416 (a proxy that will not resume).
    A path ending in / is answered with that folder's index.html (a PEP 503 simple index), and
    `sent` counts the body bytes of every answer (what a client really downloaded)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.drop_after: int | None = None
        self.portal: bytes | None = None
        self.send_length = True
        self.refuse_ranges = False
        self.ranges: list[str | None] = []
        self.paths: list[str] = []
        self.sent = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                header = self.headers.get("Range")
                server.ranges.append(header)
                server.paths.append(self.path)
                if server.portal is not None:
                    self._answer(200, server.portal, {"Content-Type": "text/html; charset=utf-8"})
                    return
                data = self._file()
                if data is None:
                    return
                start, end = _byte_range(header, len(data)) if header else (0, len(data))
                if header and (start >= len(data) or server.refuse_ranges):
                    self._answer(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                    return
                self.send_response(206 if header else 200)
                self.send_header("Content-Type", self._type())
                self.send_header("Accept-Ranges", "bytes")
                if header:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                if server.send_length:
                    self.send_header("Content-Length", str(end - start))
                self.end_headers()
                body = data[start:end]
                server.sent += len(body)
                if server.drop_after is not None:
                    body, server.drop_after = body[:server.drop_after], None
                    self.wfile.write(body)
                    self.wfile.flush()
                    self.connection.shutdown(2)  # the connection drops mid-file
                    return
                self.wfile.write(body)

            def do_HEAD(self):
                data = self._file()
                if data is not None:
                    self.send_response(200)
                    for name, value in {"Content-Type": self._type(), "Accept-Ranges": "bytes",
                                        "Content-Length": str(len(data))}.items():
                        self.send_header(name, value)
                    self.end_headers()

            def _file(self) -> bytes | None:
                relative = self.path.split("?")[0].lstrip("/")
                path = server.folder / (relative + "index.html" if relative.endswith("/") else relative)
                if not path.is_file():
                    self.send_error(404)
                    return None
                return path.read_bytes()

            def _type(self) -> str:
                return "text/html" if self.path.endswith("/") else "application/octet-stream"

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
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
