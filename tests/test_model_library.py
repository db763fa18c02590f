"""The model library against a Hub server of ours on 127.0.0.1, through the real
huggingface_hub client: sizes asked from the Hub, downloads with progress, cancel and resume,
gated repositories and tokens, failures in one line, removal through the cache's API."""
from __future__ import annotations

import os
import threading

import pytest

from engine import (
    PARTIAL,
    READY,
    REMOTE,
    DownloadCancelled,
    HubClient,
    HubError,
    list_models,
    load_model,
    missing_files,
    plan_download,
    remove_model,
)
from engine.files.paths import LM_NAME, LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME
from engine.loading.library.catalogue import needed_files
from tests.hub_fixtures import (  # noqa: F401  (fixtures)
    BF16,
    GATED,
    GOOD_TOKEN,
    NOT_A_MODEL,
    Q8,
    STRANGER_TOKEN,
    demo_files,
    hub,
    q8_folder,
)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """The client's cache for this test; the loader looks there too."""
    from huggingface_hub import constants
    folder = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    return folder


def client_for(hub, cache, token=None) -> HubClient:
    return HubClient(endpoint=hub.endpoint, cache_dir=cache, token=token)


def test_the_official_layout_picks_the_files_the_loader_reads():
    official = {LM_NAME, MIMI_NAME, TOKENIZER_NAME, "README.md", ".gitattributes"}
    assert needed_files(official, None, None, "r") == [LM_NAME, MIMI_NAME, TOKENIZER_NAME]
    both = official | {LM_Q8_NAME, "config.json", "voices.tgz"}
    assert needed_files(both, None, "int8", "r") == ["config.json", LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME,
                                                     "voices.tgz"]
    assert needed_files({"w.safetensors", MIMI_NAME, TOKENIZER_NAME}, {"moshi_name": "w.safetensors"}, None,
                        "r")[0] == "w.safetensors"
    with pytest.raises(ValueError, match=f"r: not a duplex speech model.*no {TOKENIZER_NAME}"):
        needed_files({LM_NAME, MIMI_NAME}, None, None, "r")


def test_sizes_come_from_the_hub_and_only_needed_files_count(hub, cache):
    client = client_for(hub, cache)
    plan = plan_download(client, BF16, None, "cpu")
    files = demo_files()
    assert set(plan.remote.files) == {"config.json", LM_NAME, MIMI_NAME, TOKENIZER_NAME, "diffuplex.safetensors",
                                      "mimi_config.json"}  # not the README
    assert plan.remote.files == {name: files[name].stat().st_size for name in plan.remote.files}
    assert list(plan.remote.files)[-1] == LM_NAME  # the LM last: a model is complete when it lands
    # Asking read its config.json (what the LM is called, its shape): that much is in the cache already.
    assert plan.to_download == plan.remote.size - plan.remote.files["config.json"]
    assert plan.weights == "bf16" and plan.note == ""
    assert plan.memory is not None and plan.memory.fits and plan.memory.weights == "bf16"
    int8 = plan_download(client, BF16, "int8", "cpu")
    assert int8.remote.repo == Q8 and LM_Q8_NAME in int8.remote.files and "official int8" in int8.note
    assert int8.memory.weight_bytes < plan.memory.weight_bytes
    # Asking cached the config.json it read; that is no download: the list still says so.
    assert next(e for e in list_models(cache) if e.name == BF16).state == REMOTE
    # No config.json and not a known repository: the LM's header on the Hub gives its shape (the
    # demo's 16 depformer steps: PersonaPlex's 7B).
    hub.add_repo("someone/no-config", {n: p for n, p in demo_files().items() if n != "config.json"})
    bare = plan_download(client, "someone/no-config", None, "cpu")
    assert bare.memory is not None and bare.memory.weight_bytes > 10**10
    with pytest.raises(HubError, match=f"{NOT_A_MODEL}: not a duplex speech model.*no {MIMI_NAME}"):
        client.remote(NOT_A_MODEL)


def test_a_download_reports_progress_and_gives_a_model_that_loads(hub, cache):
    client = client_for(hub, cache)
    plan = plan_download(client, BF16, None, "cpu")
    seen = []
    folder = client.download(plan.remote, seen.append)
    done = [p.done_bytes for p in seen]
    assert done == sorted(done) and done[-1] == plan.remote.size == seen[-1].total_bytes
    assert {p.file for p in seen} == set(plan.remote.files)
    for name in plan.remote.files:
        assert (folder / name).read_bytes() == demo_files()[name].read_bytes()
    assert (cache / "models--kyutai--moshiko-pytorch-bf16" / "refs" / "main").read_text() == plan.remote.revision
    assert load_model(BF16).name == BF16
    entry = next(e for e in list_models(cache) if e.name == BF16)
    assert entry.state == READY and entry.location == folder and entry.size_on_disk == plan.remote.size
    assert plan_download(client, BF16, None, "cpu").to_download == 0


def test_cancel_keeps_complete_files_and_the_next_download_fetches_the_rest(hub, cache):
    client = client_for(hub, cache)
    remote = client.remote(BF16)
    hub.delay_per_chunk = 0.02  # the LM takes over a second: time to cancel in it
    cancel = threading.Event()

    def report(progress):
        if progress.file == LM_NAME and progress.done_bytes > remote.size - remote.files[LM_NAME] + 100_000:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        client.download(remote, report, cancel)
    snapshot = client.snapshot_folder(BF16, remote.revision)
    assert missing_files(snapshot) == [LM_NAME]  # not a model: the loader and the list say so
    assert next(e for e in list_models(cache) if e.name == BF16).state == PARTIAL
    assert not list(cache.rglob("*.incomplete"))  # nothing half-written left in the cache
    assert client.cached_bytes(remote) == remote.size - remote.files[LM_NAME]
    hub.delay_per_chunk = 0
    hub.requests.clear()
    client.download(remote)
    fetched = [path for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]
    assert fetched == [f"/{BF16}/resolve/{remote.revision}/{LM_NAME}"]  # only what was missing
    assert not missing_files(snapshot)


def test_a_dropped_connection_resumes_with_a_range_request(hub, cache):
    # The client keeps what it received in 10 MiB pieces: a drop past the first piece resumes
    # from its end. The LM of this repository is 11 MiB of noise (a download does not parse it).
    lm = os.urandom(11 << 20)
    hub.add_repo("someone/large", {**{n: p for n, p in demo_files().items() if n != LM_NAME}, LM_NAME: lm})
    client = client_for(hub, cache)
    remote = client.remote("someone/large")
    hub.drop_after[LM_NAME] = (10 << 20) + 12_345
    folder = client.download(remote)
    assert (folder / LM_NAME).read_bytes() == lm
    ranges = [h.get("Range") for m, p, h in hub.requests if p.endswith(LM_NAME) and m == "GET"]
    assert ranges == [None, f"bytes={10 << 20}-"]


def test_a_gated_model_needs_an_accepted_licence_and_a_token(hub, cache):
    from huggingface_hub import constants
    anonymous = client_for(hub, cache)
    plan = plan_download(anonymous, GATED, None, "cpu")  # its description is public
    assert plan.remote.gated and plan.memory is not None  # known: its shape is PersonaPlex's
    with pytest.raises(HubError, match=f"{GATED} is gated: accept its licence at {hub.endpoint}/{GATED} and give"):
        anonymous.download(plan.remote)
    with pytest.raises(HubError, match="the licence is not accepted for this token's account"):
        client_for(hub, cache, STRANGER_TOKEN).download(plan.remote)
    with pytest.raises(HubError, match="refused the access token"):
        anonymous.save_token("hf_made_up")
    assert anonymous.save_token(GOOD_TOKEN) == "listener"
    with open(constants.HF_TOKEN_PATH) as stored:  # where huggingface_hub keeps it
        assert stored.read() == GOOD_TOKEN
    folder = client_for(hub, cache).download(plan_download(client_for(hub, cache), GATED, None, "cpu").remote)
    model = load_model(GATED)
    assert folder == model.path and sorted(model.voices) == ["DEMO"]  # voices.tgz unpacked


def test_failures_are_one_line_naming_what_failed(hub, cache):
    client = client_for(hub, cache)
    with pytest.raises(HubError, match="someone/missing: no such model repository on http://127.0.0.1"):
        client.remote("someone/missing")
    hub.fail_status[BF16] = 500
    with pytest.raises(HubError, match=f"{BF16}: the Hub answered HTTP 500"):
        client.remote(BF16)
    with pytest.raises(HubError, match=f"{BF16}: cannot reach http://127.0.0.1:9"):
        HubClient(endpoint="http://127.0.0.1:9", cache_dir=cache).remote(BF16)


def test_a_short_disk_is_refused_before_anything_is_written(hub, cache, monkeypatch):
    import shutil
    from collections import namedtuple
    client = client_for(hub, cache)
    remote = client.remote(BF16)
    need = remote.size - client.cached_bytes(remote)
    # A full disk cannot be made here without root (a small tmpfs): the free space is reported
    # as one byte short of the download instead.
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, need - 1))
    with pytest.raises(HubError, match=f"{BF16}: the download needs .* and .* has .* free"):
        client.download(remote)
    assert client.cached_bytes(remote) == remote.files["config.json"]  # only what asking read


def test_remove_frees_a_downloaded_model(hub, cache):
    client = client_for(hub, cache)
    remote = client.remote(BF16)
    client.download(remote)
    assert remove_model(BF16, cache) >= remote.size
    assert next(e for e in list_models(cache) if e.name == BF16).state == REMOTE
    with pytest.raises(HubError, match=f"{BF16}: not in the Hugging Face cache"):
        remove_model(BF16, cache)


@pytest.mark.parametrize("name", ["../../outside/secret.safetensors", "/etc/passwd", ["a list"], 7])
def test_a_config_naming_files_outside_its_folder_is_refused(hub, cache, tmp_path, name):
    import json
    files = {**demo_files(), "config.json": json.dumps({**json.loads(demo_files()["config.json"].read_text()),
                                                        "mimi_name": name}).encode()}
    hub.add_repo("someone/hostile", files)
    with pytest.raises(HubError, match="someone/hostile/config.json: .* (outside the model's folder|not a file name)"):
        client_for(hub, cache).remote("someone/hostile")
    folder = tmp_path / "hostile"
    folder.mkdir()
    for file_name, content in files.items():
        (folder / file_name).write_bytes(content if isinstance(content, bytes) else content.read_bytes())
    assert missing_files(folder)[0].startswith("usable config.json")  # not a model, in the list or the loader
    with pytest.raises(HubError.__mro__[1], match="(outside the model's folder|not a file name)"):
        load_model(folder)
