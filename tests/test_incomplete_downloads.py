"""A download left half-written (issue 46, point 6): the client's `blobs/*.incomplete` file
stays while its file is still wanted, and goes on Cancel, once its file is complete, or on
Remove; never while a live download (of any process) writes it. The interrupted download is a
real `duplexcadence download` killed with SIGKILL."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import threading
import time

import pytest

from engine import DownloadCancelled, HubClient, HubError, plan_download, remove_model
from engine.files.paths import LM_NAME, LM_Q8_NAME
from tests.fake_hub import FakeHub
from tests.hub_fixtures import INSTALLED, bytes_in, cache_folder, cli_env, tiny_model

REPO = "someone/two-weights"
LM, LM_Q8 = os.urandom(2 << 20), os.urandom(2 << 20)  # each 32 pieces of 64 kB: over a second, slowed


@pytest.fixture()
def hub():
    with FakeHub() as server:
        server.add_repo(REPO, tiny_model(lm=LM, **{LM_Q8_NAME: LM_Q8}))
        yield server


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def started_download(hub, home, lm: bytes, *args) -> tuple[subprocess.Popen, list]:
    """`duplexcadence download REPO ARGS` running, slowed, and the `.incomplete` file of the LM
    `lm` it is writing (the client names it by the content's sha256, an LFS file's ETag) once it
    has written into it for a while. The client writes in 10 MB pieces: the file is still empty."""
    hub.delay_per_chunk = 0.05
    process = subprocess.Popen([str(INSTALLED), "download", REPO, "--device", "cpu", *args],
                               env=cli_env(hub, home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blobs, deadline = cache_folder(home / "hub", REPO) / "blobs", time.monotonic() + 120
    pattern = hashlib.sha256(lm).hexdigest() + ".*incomplete"
    while time.monotonic() < deadline and process.poll() is None:
        if list(blobs.glob(pattern)):
            time.sleep(0.3)  # well inside the file's 1.6 s
            written = list(blobs.glob(pattern))
            if written and process.poll() is None:
                return process, written
        time.sleep(0.02)
    process.kill()
    pytest.fail(f"the download ended ({process.poll()}) before its LM was half-written")


def killed_download(hub, home, lm: bytes, *args) -> list:
    process, written = started_download(hub, home, lm, *args)
    process.send_signal(signal.SIGKILL)
    process.wait()
    hub.delay_per_chunk = 0
    assert all(p.exists() for p in written)  # what a killed download leaves
    return written


def test_it_is_kept_while_its_file_is_wanted_and_removed_on_cancel(hub, cache, tmp_path):
    left = killed_download(hub, tmp_path, LM_Q8, "--weights", "int8")  # in the int8 LM
    client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
    client.download(plan_download(client, REPO, "bf16", "cpu").remote)  # another LM: its own
    assert all(p.exists() for p in left)  # the int8 LM is still to be fetched
    hub.delay_per_chunk = 0.02
    cancel = threading.Event()

    def report(progress):
        if progress.file == LM_Q8_NAME and progress.done_bytes > progress.total_bytes - (1 << 20):
            cancel.set()

    with pytest.raises(DownloadCancelled):
        client.download(plan_download(client, REPO, "int8", "cpu").remote, report, cancel)
    assert not list(cache.rglob("*.incomplete"))  # the earlier one, and the one cancelled


def test_it_is_removed_once_its_file_is_complete(hub, cache, tmp_path):
    left = killed_download(hub, tmp_path, LM_Q8, "--weights", "int8")
    client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
    folder = client.download(plan_download(client, REPO, "int8", "cpu").remote)
    assert (folder / LM_Q8_NAME).is_file() and not (folder / LM_NAME).exists()
    assert not any(p.exists() for p in left) and not list(cache.rglob("*.incomplete"))


def test_remove_takes_it_but_not_from_under_a_live_download(hub, cache, tmp_path):
    process, written = started_download(hub, tmp_path, LM)
    try:
        with pytest.raises(HubError, match=f"{REPO}: it is being downloaded .*; stop that download, then remove it"):
            remove_model(REPO, cache)
        assert all(p.exists() for p in written)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        hub.delay_per_chunk = 0
    size = bytes_in(cache_folder(cache, REPO))
    assert remove_model(REPO, cache) == size
    assert not cache_folder(cache, REPO).exists()
