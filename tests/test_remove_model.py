"""Removing a model (issue 46, point 1): the named repository's own folder and nothing else,
also when other repositories share its commit (a duplicated repository keeps its commits) or
its blobs (the client's shared store); its int8 twin only when downloaded for it; the size
reported is the bytes measured on disk. The window's Remove and `duplexcadence remove` both
call engine.remove_model."""
from __future__ import annotations

import hashlib

import pytest

from engine import HubClient, HubError, missing_files, plan_download, remove_model, size_text
from tests.hub_fixtures import (  # noqa: F401  (fixtures)
    BF16,
    Q8,
    bytes_in,
    cache_folder,
    duplexcadence,
    hub,
    q8_folder,
    tiny_model,
)

SHARED = "5d1f1e0b3a7c9e2f4b6d8a0c1e3f5a7b9c0d2e4f"
COPIES = [f"someone/copy-{i}" for i in range(6)]


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def client_for(hub, cache) -> HubClient:
    return HubClient(endpoint=hub.endpoint, cache_dir=cache)


def test_removing_one_of_repositories_sharing_a_commit_leaves_the_others_whole(hub, cache, tmp_path):
    # Six duplicates of one repository, one commit. Removal by commit takes whichever repository
    # the cache scan happens to list first: an order that is right by chance cannot pass six times.
    client = client_for(hub, cache)
    content = tiny_model()
    for repo in COPIES:
        hub.add_repo(repo, content, sha=SHARED)
        client.download(client.remote(repo))
    for i, repo in enumerate(COPIES[:-1]):
        folder = cache_folder(cache, repo)
        size = bytes_in(folder)
        freed = remove_model(repo, cache)
        assert not folder.exists()
        for other in COPIES[i + 1:]:
            snapshot = client.snapshot_folder(other, SHARED)
            assert missing_files(snapshot) == [] and {p.name: p.read_bytes() for p in snapshot.iterdir()} == content
        assert freed == size
    last = COPIES[-1]
    size = bytes_in(cache_folder(cache, last))
    removed = duplexcadence(hub, tmp_path, "remove", last)  # the installed command, the same function
    assert removed.returncode == 0 and removed.stderr == f"removed {last} from {cache}: {size_text(size)} freed\n"
    assert not cache_folder(cache, last).exists()


def test_a_blob_shared_with_another_repository_is_freed_with_the_last_one(hub, cache):
    """The client 2.x keeps a Xet download's bytes once for the whole cache (cache/blobs), linked
    from each repository's blobs/. The fake Hub speaks no Xet: the client's own function moves
    the downloaded blobs into that store, as a Xet download does."""
    from huggingface_hub.utils._shared_blobs import publish_blob_to_shared_store
    client = client_for(hub, cache)
    lm = b"shared weights " * 4000
    for repo in ("someone/first", "someone/second"):
        hub.add_repo(repo, tiny_model(lm=lm, **{"README.md": repo.encode()}))
        client.download(client.remote(repo))
        blob = (client.snapshot_folder(repo, client.remote(repo).revision) / "model.safetensors").resolve()
        assert publish_blob_to_shared_store(blob_path=str(blob), xet_hash=hashlib.sha256(lm).hexdigest(),
                                            cache_dir=cache, expected_size=len(lm))
    digest = hashlib.sha256(lm).hexdigest()
    payload = cache / "blobs" / digest[:2] / digest
    first = bytes_in(cache_folder(cache, "someone/first"))
    assert payload.is_file() and first < len(lm)  # its LM is a link into the store
    assert remove_model("someone/first", cache) == first
    second = client.snapshot_folder("someone/second", client.remote("someone/second").revision)
    assert payload.is_file() and (second / "model.safetensors").read_bytes() == lm  # still linked: kept
    own = bytes_in(cache_folder(cache, "someone/second"))
    assert remove_model("someone/second", cache) == own + len(lm)
    assert not payload.exists()


def test_the_int8_twin_goes_with_the_entry_it_was_downloaded_for_alone(hub, cache):
    client = client_for(hub, cache)
    plan = plan_download(client, BF16, "int8", "cpu")
    assert plan.remote.repo == Q8
    client.download(plan.remote)
    twin = cache_folder(cache, Q8)
    size = bytes_in(twin)
    assert not cache_folder(cache, BF16).exists()  # the bf16 entry has nothing of its own
    assert remove_model(BF16, cache) == size and not twin.exists()
    # Downloaded for itself too: removing the bf16 entry leaves it to its own entry.
    client.download(plan_download(client, Q8, None, "cpu").remote)
    client.download(plan_download(client, BF16, "int8", "cpu").remote)
    client.download(plan_download(client, BF16, "bf16", "cpu").remote)
    own = bytes_in(cache_folder(cache, BF16))
    assert remove_model(BF16, cache) == own
    assert missing_files(client.snapshot_folder(Q8, plan.remote.revision)) == []
    assert remove_model(Q8, cache) > 0
    with pytest.raises(HubError, match=f"{BF16}: not in the Hugging Face cache"):
        remove_model(BF16, cache)
