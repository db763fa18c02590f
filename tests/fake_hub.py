"""A real HTTP server on loopback that speaks enough of the Hugging Face Hub's HTTP API for the real
`huggingface_hub` client (1.x, 2.x) to run with no network: model info, trees, paths-info, whoami, /resolve/
with ranges, gated repos, the Hub's error headers; switches to fail, drop a connection part-way, or slow down."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 64 * 1024
LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
# Repo ids are "name" or "namespace/name"; revisions arrive quoted with safe="" (so never contain "/").
_REPO = r"(?P<repo>[^/]+(?:/[^/]+)?)"
_ROUTES = [
    ("info", re.compile(rf"^/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?$")),
    ("tree", re.compile(rf"^/api/models/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")),
    ("paths", re.compile(rf"^/api/models/{_REPO}/paths-info/(?P<rev>[^/]+)$")),
    ("file", re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")),
]


def _chunks(source: bytes | Path, start: int, end: int):
    """The bytes [start, end) in 64 KiB pieces; a Path is read as it is sent, never whole."""
    with io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb") as f:
        f.seek(start)
        while start < end and (piece := f.read(min(CHUNK, end - start))):
            start += len(piece)
            yield piece


@dataclass
class _File:
    path: str
    source: bytes | Path
    size: int
    sha256: str
    lfs: bool
    pointer_size: int
    blob_id: str  # for an LFS file, git stores (and the Hub lists) the id of the pointer file, not of the content

    def entry(self) -> dict:  # the file as /tree and /paths-info list it
        lfs = {"lfs": {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}} if self.lfs else {}
        return {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path, **lfs}

    def sibling(self) -> dict:  # the file in model info with ?blobs=true; its lfs says "sha256" where /tree says "oid"
        lfs = {"lfs": {"sha256": self.sha256, "size": self.size, "pointerSize": self.pointer_size}} if self.lfs else {}
        return {"rfilename": self.path, "size": self.size, "blobId": self.blob_id, **lfs}


def _make_file(path: str, source: bytes | Path, lfs_min_size: int) -> _File:
    # blob_id is the id git gives a blob (sha1 of "blob SIZE\0" + bytes): the Hub's `oid`, and a plain file's ETag.
    size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    for piece in _chunks(source, 0, size):
        sha256.update(piece)
        sha1.update(piece)
    digest, lfs = sha256.hexdigest(), size >= lfs_min_size
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {size}\n".encode()
    pointer_id = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
    return _File(path, source, size, digest, lfs, len(pointer) if lfs else 0, pointer_id if lfs else sha1.hexdigest())


@dataclass
class _Repo:
    files: dict[str, _File]
    sha: str
    gated: bool

    def folders(self) -> list[str]:
        return sorted({p.rsplit("/", i)[0] for p in self.files for i in range(1, p.count("/") + 1)})

    def folder_entry(self, path: str) -> dict:
        oid = hashlib.sha1(f"{self.sha}:{path}".encode()).hexdigest()
        return {"type": "directory", "oid": oid, "size": 0, "path": path}


class _Headers(dict):
    """Request headers, keys lowercased; lookups ignore case as HTTP does (headers["Range"] == headers["range"])."""

    def __init__(self, items):
        super().__init__((k.lower(), v) for k, v in items)

    def __getitem__(self, key):
        return super().__getitem__(key.lower())

    def __contains__(self, key):
        return super().__contains__(key.lower())

    def get(self, key, default=None):
        return super().get(key.lower(), default)


class FakeHub:
    """Context manager. `with FakeHub() as hub:` starts the server; hub.endpoint is "http://127.0.0.1:PORT"."""

    def __init__(self):
        # filename -> bytes: the next GET of it sends that many bytes of the body, then drops the connection (once:
        # the entry is removed, so the client's resume succeeds).
        self.drop_after: dict[str, int] = {}
        self.fail_status: dict[str, int] = {}  # filename or repo_id -> status answered to every request for it
        self.requests: list[tuple[str, str, dict]] = []  # (method, path with query, headers) of every request
        self.delay_per_chunk = 0.0  # seconds slept after each 64 KiB of a file body: lets a test cancel mid-file
        self._repos: dict[str, _Repo] = {}
        self._tokens: dict[str, tuple[str, set[str]]] = {}
        self._open: set[socket.socket] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects of the Hub

            def log_message(self, *args):  # keep the test output clean
                pass

            def setup(self):  # track open connections: a kept-alive one would outlive the server otherwise
                super().setup()
                hub._open.add(self.connection)

            def finish(self):
                hub._open.discard(self.connection)
                super().finish()

            def do_GET(self):
                try:
                    hub._handle(self)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (cancelled) mid-response
                    self.close_connection = True

            do_HEAD = do_POST = do_GET

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval: shutdown() waits for it, at the end of every test.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        # Also cut the kept-alive connections, whose threads would go on answering the client's connection pool:
        # once the hub is closed, the client must find nothing there (connection refused), as with a dead server.
        for connection in list(self._open):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def add_repo(self, repo_id: str, files: dict[str, bytes | Path], *, gated: bool = False,
                 lfs_min_size: int = 1024, sha: str | None = None) -> str:
        """Serve a model repo with these files (name -> bytes, or a Path read when served). Returns its commit sha,
        derived from the content, or `sha` (a repository duplicated on the Hub keeps its commits: two repos can
        have the same one). Files of at least lfs_min_size bytes are LFS files, as the Hub lists them."""
        entries = {name: _make_file(name, source, lfs_min_size) for name, source in files.items()}
        sha = sha or hashlib.sha1(json.dumps([repo_id, sorted((n, f.blob_id) for n, f in entries.items())]).encode()
                                  ).hexdigest()
        self._repos[repo_id] = _Repo(entries, sha, gated)
        return sha

    def accept_token(self, token: str, user: str = "tester", *, accepted: tuple[str, ...] = ()) -> None:
        """A valid access token for `user`; `accepted`: the gated repos whose licence this user accepted."""
        self._tokens[token] = (user, set(accepted))

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        self.requests.append((req.command, req.path, _Headers(req.headers.items())))
        body = req.rfile.read(int(req.headers.get("Content-Length") or 0))  # read it all, or keep-alive breaks
        url = urlsplit(req.path)
        token = (req.headers.get("Authorization") or "").removeprefix("Bearer ") or None  # a bad one is invalid
        if url.path == "/api/whoami-v2":
            if token not in self._tokens:
                return _send(req, 401, {"error": "Invalid user token."})
            return _send(req, 200, {"type": "user", "name": self._tokens[token][0], "orgs": [],
                                    "auth": {"accessToken": {"displayName": "test", "role": "read"}}})
        kind, m = next(((k, m) for k, rx in _ROUTES if (m := rx.match(url.path))), (None, None))
        if m is None:
            return _send(req, 404, {"error": "Sorry, we can't find the page you are looking for."})
        repo_id, rev = unquote(m["repo"]), unquote(m["rev"] or "main")
        path = unquote(m.groupdict().get("path") or "")
        status = self.fail_status.get(repo_id) or (self.fail_status.get(path) if kind == "file" else None)
        if status:  # an outage: answered before anything else is looked at
            return _error(req, status, HTTPStatus(status).phrase)
        if token is not None and token not in self._tokens:
            # The Hub's answer to a bad token; no X-Error-Code, so the client raises a plain HfHubHTTPError.
            return _error(req, 401, "Invalid credentials in Authorization header")
        repo = self._repos.get(repo_id)
        if repo is None:  # 401, not 404: the Hub does not tell a missing repo from a private one
            return _error(req, 401, "Repository not found", "RepoNotFound")
        if rev not in ("main", repo.sha):
            return _error(req, 404, f"Invalid rev id: {rev}", "RevisionNotFound")
        if kind == "info":
            return _send(req, 200, _model_info(repo_id, repo, parse_qs(url.query)))
        if kind == "tree":
            recursive = parse_qs(url.query).get("recursive", [""])[0].lower() in ("1", "true")
            return self._tree(req, repo, path, recursive)
        if kind == "paths":
            return self._paths_info(req, repo, body)
        return self._file(req, repo_id, repo, path, token)

    def _tree(self, req, repo: _Repo, path: str, recursive: bool) -> None:
        folders = repo.folders()
        if path and path not in folders:
            return _error(req, 404, f"{path} does not exist on \"main\"", "EntryNotFound")
        prefix = f"{path}/" if path else ""
        entries = [repo.folder_entry(d) for d in folders if d.startswith(prefix)]
        entries += [f.entry() for f in repo.files.values() if f.path.startswith(prefix)]
        if not recursive:
            entries = [e for e in entries if "/" not in e["path"][len(prefix):]]
        _send(req, 200, sorted(entries, key=lambda e: e["path"]))  # one page: no Link header, so no pagination

    def _paths_info(self, req, repo: _Repo, body: bytes) -> None:
        # The client posts a form (paths=a&paths=b&expand=False); accept JSON too.
        is_json = req.headers.get("Content-Type", "").startswith("application/json")
        paths = (json.loads(body or b"{}") if is_json else parse_qs(body.decode())).get("paths", [])
        folders = set(repo.folders())
        entries = [repo.files[p].entry() if p in repo.files else repo.folder_entry(p)
                   for p in (paths if isinstance(paths, list) else [paths]) if p in repo.files or p in folders]
        _send(req, 200, entries)

    def _file(self, req, repo_id: str, repo: _Repo, path: str, token: str | None) -> None:
        if repo.gated and token is None:
            return _error(req, 401, f"Access to model {repo_id} is restricted. You must have access to it and be "
                                    "authenticated to access it. Please log in.", "GatedRepo")
        if repo.gated and repo_id not in self._tokens[token][1]:
            return _error(req, 403, f"Access to model {repo_id} is restricted and you are not in the authorized "
                                    f"list. Visit {self.endpoint}/{repo_id} to ask for access.", "GatedRepo")
        f = repo.files.get(path)
        commit = {"X-Repo-Commit": repo.sha}  # also on a 404: the client caches that the file does not exist
        if f is None:
            return _error(req, 404, "Entry not found", "EntryNotFound", extra=commit)
        start, end, status, ranged = 0, f.size, 200, {}
        rng = re.fullmatch(r"bytes=(\d*)-(\d*)", (req.headers.get("Range") or "").strip())
        if req.headers.get("Range"):
            if rng and rng[1]:
                start, end = int(rng[1]), min(int(rng[2]) + 1, f.size) if rng[2] else f.size
            elif rng and rng[2]:  # bytes=-N: the last N bytes
                start = max(f.size - int(rng[2]), 0)
            if not rng or not (rng[1] or rng[2]) or start >= end:
                return _error(req, 416, "Range Not Satisfiable",
                              extra={**commit, "Content-Range": f"bytes */{f.size}"})
            status, ranged = 206, {"Content-Range": f"bytes {start}-{end - 1}/{f.size}"}
        headers = {**commit, **ranged, "ETag": f'"{f.sha256 if f.lfs else f.blob_id}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream", "Content-Length": str(end - start)}
        if f.lfs:  # the client prefers these to ETag / Content-Length, as for a real LFS file
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        _start(req, status, headers)
        if req.command == "HEAD":
            return
        drop = self.drop_after.pop(path, None)  # atomic, so only one of concurrent GETs is dropped
        sent = 0
        for piece in _chunks(f.source, start, end):
            if drop is not None and sent + len(piece) >= drop:
                req.wfile.write(piece[:drop - sent])  # unbuffered: it is on the wire before the shutdown
                req.connection.shutdown(socket.SHUT_RDWR)  # the connection drops mid-file
                req.close_connection = True
                return
            req.wfile.write(piece)
            sent += len(piece)
            if self.delay_per_chunk:
                time.sleep(self.delay_per_chunk)


def _model_info(repo_id: str, repo: _Repo, query: dict) -> dict:
    # `files_metadata=True` is sent as ?blobs=true; the Hub then adds size, blobId and lfs to each sibling.
    blobs = query.get("blobs", [""])[0].lower() in ("1", "true")
    siblings = [f.sibling() if blobs else {"rfilename": f.path} for f in repo.files.values()]
    return {"_id": repo.sha[:24], "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0],
            "sha": repo.sha, "lastModified": LAST_MODIFIED, "createdAt": LAST_MODIFIED, "private": False,
            "disabled": False, "gated": "manual" if repo.gated else False, "downloads": 0, "likes": 0, "tags": [],
            "library_name": "transformers", "siblings": siblings}


def _send(req, status: int, payload, extra: dict | None = None) -> None:
    """A JSON answer (no body to a HEAD), always with Content-Length: the connection is kept alive."""
    body = json.dumps(payload).encode()
    _start(req, status, {"Content-Type": "application/json", **(extra or {}), "Content-Length": len(body)})
    if req.command != "HEAD":
        req.wfile.write(body)


def _start(req, status: int, headers: dict) -> None:
    req.send_response(status)
    for key, value in headers.items():
        req.send_header(key, str(value))
    req.end_headers()


def _error(req, status: int, message: str, code: str | None = None, extra: dict | None = None) -> None:
    """An error as the Hub sends it: X-Error-Code (which the client maps to an exception class), the message
    in X-Error-Message (the only place a HEAD answer can carry it) and in the JSON body."""
    headers = {**({"X-Error-Code": code} if code else {}), "X-Error-Message": message, **(extra or {})}
    _send(req, status, {"error": message}, headers)
