"""Why a download failed and what to do, in one line (issue 46, points 13 and 16), from the
installed `duplexcadence` command against the fake Hub: a missing int8 twin, no token, a refused
token, a licence not accepted, no network (a refused port, and the Hub gone mid-download), a
full disk (a real small tmpfs), a name that is not on the Hub (with the close known names);
and progress as plain lines when it is not shown on a terminal."""
from __future__ import annotations

import hashlib
import logging
import os
import pty
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from engine import HubClient, HubError
from engine.files.paths import LM_NAME
from tests.fake_hub import FakeHub
from tests.hub_fixtures import (
    BF16,
    GATED,
    GOOD_TOKEN,
    INSTALLED,
    Q8,
    STRANGER_TOKEN,
    cache_folder,
    cli_env,
    demo_files,
    duplexcadence,
)


@pytest.fixture()
def hub():
    """The bf16 model without its int8 twin, and a gated one."""
    with FakeHub() as server:
        server.add_repo(BF16, demo_files())
        server.add_repo(GATED, demo_files(), gated=True)
        server.accept_token(GOOD_TOKEN, "listener", accepted=(GATED,))
        server.accept_token(STRANGER_TOKEN, "stranger")
        yield server


def one_line(done) -> str:
    """The error a failed command ended with: one line, after the plan and progress lines of a
    download begun (and nothing else: no traceback, no client chatter)."""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    *before, last = done.stderr.splitlines()
    assert last.startswith("duplexcadence: error: ") and done.stderr.endswith("\n"), done.stderr[-3000:]
    assert all(_PROGRESS.match(line) or " to download into " in line for line in before), done.stderr[-3000:]
    return last.removeprefix("duplexcadence: error: ")


def test_a_missing_int8_twin_says_to_choose_bf16(hub, tmp_path):
    assert one_line(duplexcadence(hub, tmp_path, "download", BF16, "--weights", "int8", "--device", "cpu")) == (
        f"{BF16}: its int8 twin {Q8} is not on {hub.endpoint}; choose bf16 weights to download {BF16} itself")


def test_token_failures_say_what_to_give(hub, tmp_path):
    assert one_line(duplexcadence(hub, tmp_path, "download", GATED)) == (
        f"{GATED} is gated: accept its licence at {hub.endpoint}/{GATED} and give a Hugging Face access token "
        "(huggingface.co/settings/tokens); set HF_TOKEN, or run `duplexcadence login`")
    assert one_line(duplexcadence(hub, tmp_path, "download", BF16, token="hf_made_up")) == (
        f"{BF16}: the Hub refused the access token (invalid or expired); give a new one "
        "(huggingface.co/settings/tokens); store it with `duplexcadence login` (or set HF_TOKEN)")
    assert one_line(duplexcadence(hub, tmp_path, "download", GATED, token=STRANGER_TOKEN)) == (
        f"{GATED}: the licence is not accepted for this token's account; accept it at {hub.endpoint}/{GATED}, then "
        "download again")


def test_no_network_says_so_and_what_was_kept(hub, tmp_path):
    with socket.socket() as probe:  # a port nothing listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = duplexcadence(None, tmp_path, "download", BF16, env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert one_line(refused) == (f"{BF16}: cannot reach http://127.0.0.1:{port} (ConnectError); check the network "
                                 "connection, then try again")
    # The Hub goes away during the LM (the last file): what came before stays.
    hub.delay_per_chunk = 0.05
    process = subprocess.Popen([str(INSTALLED), "download", BF16, "--device", "cpu"], env=cli_env(hub, tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(p.endswith("/model.safetensors") and m == "GET" for m, p, _ in list(hub.requests)):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.02)
    hub.__exit__(None, None, None)
    out, err = process.communicate(timeout=300)
    lost = one_line(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    assert re.fullmatch(rf"{BF16}: cannot reach {hub.endpoint} \(\w+\); check the network connection, then try "
                        r"again; kept the [\d.]+ [kM]B already downloaded", lost), lost


def _in_small_tmpfs(hub, folder, script: str, size: str) -> subprocess.CompletedProcess:
    """`script` (sh) with HF_HOME a tmpfs of `size` at `folder`, mounted in a mount namespace of
    its own (as root, or as a user where user namespaces are allowed); skipped where none can be."""
    folder.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs Linux's unshare to mount a small tmpfs")
    mount = f"mount -t tmpfs -o size={size} tmpfs {folder}"
    probe = subprocess.run([unshare, "-rm", "sh", "-c", mount], capture_output=True)
    if probe.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode().strip()}")
    return subprocess.run([unshare, "-rm", "sh", "-c", f"{mount} && {script}"], capture_output=True, text=True,
                          timeout=300, env=cli_env(hub, folder))


def test_a_full_disk_is_refused_before_downloading_and_named_when_it_fills(hub, tmp_path):
    command = f"{INSTALLED} download {BF16} --device cpu"
    small = tmp_path / "small"
    before = _in_small_tmpfs(hub, small, command, "1m")
    assert re.fullmatch(rf"{BF16}: the download needs [\d.]+ MB and {small / 'hub'} has 1\.0 MB free; free some "
                        r"space or set HF_HOME to a larger disk", one_line(before)), before.stderr
    # Room for the download, until another program fills the disk during the LM (the last file).
    hub.delay_per_chunk = 0.02
    roomy = tmp_path / "roomy"
    lm = hashlib.sha256(demo_files()[LM_NAME].read_bytes()).hexdigest()  # an LFS file's blob name
    fill = (f"(while ! ls {cache_folder(roomy / 'hub', BF16)}/blobs/{lm}.*incomplete >/dev/null 2>&1; do sleep 0.02; "
            f"done; head -c 64M /dev/zero > {roomy}/filler 2>/dev/null) & {command}; rc=$?; wait; exit $rc")
    during = _in_small_tmpfs(hub, roomy, fill, "24m")
    assert re.fullmatch(rf"{BF16}: no space left on tmpfs \(mounted at {roomy}\); free some space or set HF_HOME "
                        r"to a larger disk, then download again; kept the [\d.]+ [kM]B already downloaded",
                        one_line(during)), during.stderr


def test_a_name_not_on_the_hub_says_so_and_offers_the_close_known_names(hub, tmp_path):
    assert one_line(duplexcadence(hub, tmp_path, "download", "moshiko")) == (
        f"moshiko: no such model repository on {hub.endpoint} (check the spelling; a private one needs an access "
        f"token); did you mean {BF16} or {Q8}?")
    hub.fail_status["someone/missing"] = 404  # as a mirror answers: a bare 404, no error code
    assert one_line(duplexcadence(hub, tmp_path, "download", "someone/missing")) == (
        f"someone/missing: no such model repository on {hub.endpoint} (check the spelling; a private one needs an "
        "access token)")


def test_a_failure_is_logged_with_what_the_client_raised(hub, tmp_path, caplog):
    client = HubClient(endpoint=hub.endpoint, cache_dir=tmp_path / "hub")
    with caplog.at_level(logging.INFO, logger="engine"), pytest.raises(HubError) as failed:
        client.remote("kyutai/moshiko-pytorch-bf61")
    assert str(failed.value).endswith(f"; did you mean {BF16}?") and failed.value.reason == "not_found"
    assert any(r.getMessage().startswith(f"{failed.value} (RepositoryNotFoundError: ") for r in caplog.records)


_PROGRESS = re.compile(r"^[\w.-]+: [\d.]+ [kMG]?B of [\d.]+ [kMG]?B( · [\d.]+ [kMG]?B/s · .+ left)?$")


def test_progress_is_plain_lines_when_piped_and_a_bar_on_a_terminal(hub, tmp_path):
    piped = duplexcadence(hub, tmp_path, "download", BF16, "--device", "cpu")
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stderr and "\x1b" not in piped.stderr
    lines = piped.stderr.splitlines()
    progress = [line for line in lines if _PROGRESS.match(line)]
    assert len(progress) >= len(demo_files()) and progress[-1].startswith(f"{LM_NAME}: ")
    done, total = progress[-1].removeprefix(f"{LM_NAME}: ").split(" of ")
    assert done == total
    assert lines[-1].startswith(f"downloaded {BF16} to ")
    shutil.rmtree(tmp_path / "hub")
    command = [str(INSTALLED), "download", BF16, "--device", "cpu"]
    rc, shown = _on_a_terminal(command, cli_env(hub, tmp_path))
    assert rc == 0 and "\r[" in shown
    shutil.rmtree(tmp_path / "hub")
    hub.fail_status[LM_NAME] = 403  # the last file refused: the bar stands when the error comes
    rc, shown = _on_a_terminal(command, cli_env(hub, tmp_path))
    assert rc == 2 and "\r[" in shown and "\ncannot" not in shown
    assert shown.endswith(f"\nduplexcadence: error: {BF16}: the Hub answered HTTP 403; try again later; kept the "
                          f"{shown.split('kept the ')[-1]}") and shown.count("duplexcadence: error:") == 1


def _on_a_terminal(command: list[str], env: dict) -> tuple[int, str]:
    """What `command` writes to its stderr when that is a terminal (a pseudo-terminal, which
    writes each newline as CR LF), and its exit status."""
    main, side = pty.openpty()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=side)
    os.close(side)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the other side closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    rc = process.wait(timeout=300)
    reader.join(timeout=10)
    os.close(main)
    return rc, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
