"""The fake Hub (tests/fake_hub.py) against the real huggingface_hub client: downloads, resume after a
dropped connection, gated repos, the error classes, the listing APIs, outages and whoami."""
from __future__ import annotations

import hashlib
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download

try:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
except ImportError:  # older clients only export them from huggingface_hub.utils
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

from tests.fake_hub import FakeHub

REPO = "kyutai/tiny-model"
FILES = {
    "config.json": b'{"dim": 8}\n',
    "tokenizer/vocab.txt": b"a\nb\nc\n",
    "model.safetensors": hashlib.sha256(b"weights").digest() * 2000,  # 64 000 bytes: listed as LFS
}
# The client hands over streamed bytes in 10 MiB pieces (constants.DOWNLOAD_CHUNK_SIZE) and resumes from
# the last whole piece, so only a drop after the first 10 MiB shows up as a Range request.
BIG = hashlib.sha256(b"big").digest() * (11 * 2**20 // 32)


@pytest.fixture
def hub():
    with FakeHub() as hub:
        hub.add_repo(REPO, FILES)
        yield hub


def test_snapshot_download_is_byte_identical(hub, tmp_path):
    folder = Path(snapshot_download(REPO, cache_dir=tmp_path, endpoint=hub.endpoint, token=False))
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(FILES)
    for name, content in FILES.items():
        assert (folder / name).read_bytes() == content


def test_snapshot_download_serves_files_from_disk(tmp_path):
    source = tmp_path / "weights.bin"
    source.write_bytes(b"x" * 300_000)
    with FakeHub() as hub:
        sha = hub.add_repo("a/b", {"weights.bin": source})
        folder = Path(snapshot_download("a/b", cache_dir=tmp_path / "cache", endpoint=hub.endpoint, token=False))
    assert folder.name == sha
    assert (folder / "weights.bin").read_bytes() == source.read_bytes()


def test_download_resumes_after_a_dropped_connection(hub, tmp_path):
    hub.add_repo("a/big", {"big.bin": BIG})
    hub.drop_after["big.bin"] = 10 * 2**20 + 12345
    try:  # 2.x and 1.20+ resume within the call (after a 1 s pause) ...
        path = hf_hub_download("a/big", "big.bin", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    except Exception as error:  # ... older ones raise the transport's error, and resume on the next call
        assert type(error).__name__ in ("RemoteProtocolError", "ChunkedEncodingError")  # httpx / requests (0.x)
        path = hf_hub_download("a/big", "big.bin", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    assert Path(path).read_bytes() == BIG
    gets = [headers for method, url, headers in hub.requests if method == "GET" and url.endswith("/big.bin")]
    assert len(gets) == 2 and "Range" not in gets[0]
    if not huggingface_hub.__version__.startswith(("1.18.", "1.19.")):  # these drop the partial file: no resume
        assert gets[1]["Range"] == f"bytes={10 * 2**20}-"
    assert not hub.drop_after  # used once


def test_gated_repo_needs_an_accepted_token(hub, tmp_path):
    hub.add_repo("org/gated", {"config.json": b"{}"}, gated=True)
    hub.accept_token("hf_not_accepted")
    hub.accept_token("hf_accepted", "alice", accepted=("org/gated",))
    assert HfApi(endpoint=hub.endpoint).model_info("org/gated", token=False).gated == "manual"
    for token in (False, "hf_not_accepted"):
        with pytest.raises(GatedRepoError) as caught:
            hf_hub_download("org/gated", "config.json", cache_dir=tmp_path, endpoint=hub.endpoint, token=token)
        assert caught.value.response.status_code == (401 if token is False else 403)
    path = hf_hub_download("org/gated", "config.json", cache_dir=tmp_path, endpoint=hub.endpoint, token="hf_accepted")
    assert Path(path).read_bytes() == b"{}"


def test_invalid_token_is_a_plain_401(hub, tmp_path):
    with pytest.raises(HfHubHTTPError) as caught:
        hf_hub_download(REPO, "config.json", cache_dir=tmp_path, endpoint=hub.endpoint, token="hf_wrong")
    assert caught.value.response.status_code == 401
    assert not isinstance(caught.value, RepositoryNotFoundError)


def test_unknown_repo_file_and_revision(hub, tmp_path):
    with pytest.raises(RepositoryNotFoundError) as caught:
        hf_hub_download("nobody/nothing", "config.json", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    assert not isinstance(caught.value, GatedRepoError)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.endpoint).model_info("nobody/nothing", token=False)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.bin", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="v9", cache_dir=tmp_path, endpoint=hub.endpoint, token=False)


def test_listing_apis_report_sizes_and_lfs(hub):
    api = HfApi(endpoint=hub.endpoint, token=False)
    info = api.model_info(REPO, files_metadata=True)
    assert len(info.sha) == 40 and info.private is False and info.gated is False
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {name: len(content) for name, content in FILES.items()}
    lfs = {s.rfilename: s.lfs for s in info.siblings if s.lfs}
    assert list(lfs) == ["model.safetensors"]
    assert lfs["model.safetensors"].sha256 == hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    assert api.repo_info(REPO, revision=info.sha).sha == info.sha

    tree = {e.path: e for e in api.list_repo_tree(REPO, recursive=True)}
    assert set(tree) == set(FILES) | {"tokenizer"}
    assert tree["model.safetensors"].size == 64_000 and tree["model.safetensors"].lfs.size == 64_000
    assert tree["config.json"].lfs is None
    assert tree["config.json"].blob_id == hashlib.sha1(b"blob 11\0" + FILES["config.json"]).hexdigest()
    assert {e.path for e in api.list_repo_tree(REPO)} == {"config.json", "model.safetensors", "tokenizer"}
    assert sorted(api.list_repo_files(REPO)) == sorted(FILES)

    paths = api.get_paths_info(REPO, ["model.safetensors", "tokenizer/vocab.txt", "missing"], revision=info.sha)
    assert {p.path: p.size for p in paths} == {"model.safetensors": 64_000, "tokenizer/vocab.txt": 6}


def test_range_requests(hub):
    from huggingface_hub.utils import get_session

    url = f"{hub.endpoint}/{REPO}/resolve/main/model.safetensors"
    part = get_session().get(url, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == FILES["model.safetensors"][10:20]
    assert part.headers["Content-Range"] == "bytes 10-19/64000"
    head = get_session().head(url)
    assert head.headers["X-Linked-Size"] == "64000" and head.headers["Accept-Ranges"] == "bytes"
    assert head.headers["ETag"] == f'"{hashlib.sha256(FILES["model.safetensors"]).hexdigest()}"'
    assert get_session().get(url, headers={"Range": "bytes=64000-"}).status_code == 416


def test_fail_status_is_an_http_error(hub):
    hub.fail_status[REPO] = 500
    with pytest.raises(HfHubHTTPError) as caught:  # model_info does not retry, so this is immediate
        HfApi(endpoint=hub.endpoint).model_info(REPO, token=False)
    assert caught.value.response.status_code == 500
    del hub.fail_status[REPO]
    assert HfApi(endpoint=hub.endpoint).model_info(REPO, token=False).id == REPO


def test_whoami(hub):
    hub.accept_token("hf_good", "alice")
    api = HfApi(endpoint=hub.endpoint)
    me = api.whoami(token="hf_good")
    assert me["name"] == "alice" and me["auth"]["accessToken"]["role"] == "read"
    with pytest.raises(Exception) as caught:  # HfHubHTTPError (a plain requests.HTTPError on 0.x)
        api.whoami(token="hf_bad")
    assert caught.value.response.status_code == 401
    method, path, headers = hub.requests[0]
    assert (method, path, headers["Authorization"]) == ("GET", "/api/whoami-v2", "Bearer hf_good")


def test_a_closed_hub_refuses_connections(tmp_path):
    with FakeHub() as hub:
        hub.add_repo("a/b", {"config.json": b"{}"})
        api = HfApi(endpoint=hub.endpoint, token=False)
        api.model_info("a/b")  # leaves a kept-alive connection in the client's pool
    with pytest.raises(Exception) as caught:  # httpx2 / httpx (1.x) ConnectError, requests ConnectionError (0.x)
        api.model_info("a/b")
    assert type(caught.value).__name__ in ("ConnectError", "ConnectionError")
