"""One wheel's bytes over HTTP into its `.part` file (app/gpu/cuda_torch.py decides what to fetch
and checks what came): resumed with a range request, never read past the size the manifest
gives, and refused before anything is saved when the answer is not the manifest's file (a
captive portal's or an error's HTML page, a file of another size). Nothing here imports torch
or Qt."""
from __future__ import annotations

import http.client
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20
WHEEL_MAGIC = b"PK\x03\x04"
"""A wheel is a zip archive, which starts with its first entry's local header."""
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")

ProgressFn = Callable[[int, int], None]  # (bytes done, bytes in all)


class OfflineError(OSError):
    """The download server could not be reached; what was downloaded is kept."""


class Cancelled(Exception):
    pass


class RangeRefused(OSError):
    """HTTP 416: the server has no bytes from the offset asked for (a `.part` longer than its
    file, or a server that will not resume). `total`: the file's size if the server said it."""

    def __init__(self, message: str, total: int | None):
        super().__init__(message)
        self.total = total


class NotTheFile(ValueError):
    """The server's answer is not the manifest's file; nothing of it was saved."""


def starts_as_wheel(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(WHEEL_MAGIC)) == WHEEL_MAGIC


def download(url: str, size: int, part: Path, have: int, cancel_event: threading.Event,
             timeout: float, progress: ProgressFn) -> None:
    """Append `url`'s bytes from `have` on to `part` (`have` 0: write it anew), `size` at most.
    Raises OfflineError (unreachable, or dropped: the part is kept), Cancelled, RangeRefused,
    NotTheFile, or ValueError when the body goes on past `size` (the part is removed)."""
    if cancel_event.is_set():
        raise Cancelled()
    host = urllib.parse.urlsplit(url).netloc
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            total = re.fullmatch(r"bytes \*/(\d+)", (exc.headers.get("Content-Range") or "").strip())
            raise RangeRefused(f"{url}: the server has no bytes from {have} on (HTTP 416)",
                               int(total[1]) if total else None) from exc
        raise OSError(f"{url}: the server answered {exc.code} {exc.reason}") from exc
    except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise OfflineError(f"cannot reach {host}: {reason}") from exc
    with response:
        if have and response.status != 206:  # the server ignored the range: start over
            have = 0
        _check_headers(url, size, have, response)
        chunk = _read(response, min(CHUNK, size - have), host)
        if not have and chunk and not chunk.startswith(WHEEL_MAGIC):
            raise NotTheFile(f"{url}: the server's answer is not a wheel (it starts with {chunk[:16]!r}); "
                             "nothing was saved")
        done = have
        with open(part, "ab" if have else "wb") as out:
            progress(done, size)
            while chunk:
                out.write(chunk)
                done += len(chunk)
                progress(done, size)
                if cancel_event.is_set():
                    raise Cancelled()
                chunk = _read(response, min(CHUNK, size - done), host) if done < size else b""
        if done == size and _read(response, 1, host):
            part.unlink()
            raise ValueError(f"{url}: the server sent more than the manifest's {size} bytes; "
                             "the download was discarded")
    if done < size:  # http.client ends a short body quietly
        raise OfflineError(f"the connection to {host} dropped after {done} of {size} bytes")


def _check_headers(url: str, size: int, have: int, response: http.client.HTTPResponse) -> None:
    """What the headers already tell: an HTML page, or a file of another size than `size`."""
    if response.headers.get_content_type() == "text/html":
        raise NotTheFile(f"{url}: the server sent an HTML page, not a wheel; nothing was saved")
    total = None
    if response.status == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if match is None or int(match[1]) != have:
            raise NotTheFile(f"{url}: the server did not answer from byte {have} as asked; nothing was saved")
        total = None if match[2] == "*" else int(match[2])
    length = response.headers.get("Content-Length", "").strip()
    if total is None and length.isdigit():
        total = have + int(length)
    if total is not None and total != size:
        raise NotTheFile(f"{url}: the server's file is {total} bytes, the manifest says {size}; "
                         "nothing was saved")


def _read(response: http.client.HTTPResponse, n: int, host: str) -> bytes:
    try:
        return response.read(n)
    except (TimeoutError, ConnectionError, http.client.IncompleteRead) as exc:
        raise OfflineError(f"the connection to {host} dropped: {exc}") from exc
