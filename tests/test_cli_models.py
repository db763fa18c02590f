"""`duplexcadence models / download / remove / login` as a user runs them: a fresh process,
the Hub given by HF_ENDPOINT (a server of ours on 127.0.0.1), the cache and token under
HF_HOME, a token in HF_TOKEN; errors in one line."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.hub_fixtures import BF16, GATED, GOOD_TOKEN, Q8, hub, q8_folder  # noqa: F401  (fixtures)


def cli(hub, home, *args, token=None, stdin=None):
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home)}
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=300)


def test_models_says_what_each_download_is_and_whether_it_fits(hub, tmp_path):
    result = cli(hub, tmp_path, "models", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Downloads go to {tmp_path / 'hub'}" in out
    assert "demo  [ready]" in out
    section = out[out.index(f"\n{BF16}  [not downloaded]"):]
    assert "bf16: download" in section and "; fits: " in section
    assert "int8: download" in section and f"downloads {Q8}, the official int8 files" in section
    assert f"\n{GATED}  [not downloaded, gated]" in out
    assert "kyutai/moshika-pytorch-bf16: no such model repository" in out  # not on this Hub
    assert "Traceback" not in out + result.stderr


def test_download_int8_fetches_the_q8_twin_then_it_is_ready_then_removed(hub, tmp_path):
    result = cli(hub, tmp_path, "download", BF16, "--weights", "int8", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert f"int8: downloads {Q8}" in result.stderr and "model.q8.safetensors: " in result.stderr  # plain lines
    assert f"downloaded {Q8} to {tmp_path / 'hub'}" in result.stderr
    listed = cli(hub, tmp_path, "models", "--device", "cpu").stdout
    section = listed[listed.index(f"\n{Q8}  [ready]"):]
    assert "fits: demo" in section.splitlines()[4] or "fits: " in section
    removed = cli(hub, tmp_path, "remove", Q8)
    assert removed.returncode == 0 and f"removed {Q8}" in removed.stderr and "freed" in removed.stderr
    again = cli(hub, tmp_path, "remove", Q8)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "not in the Hugging Face cache" in again.stderr


def test_a_gated_model_downloads_with_a_token_from_hf_token_or_login(hub, tmp_path):
    refused = cli(hub, tmp_path, "download", GATED)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"{GATED} is gated: accept its licence at {hub.endpoint}/{GATED}" in refused.stderr
    assert cli(hub, tmp_path, "download", GATED, token=GOOD_TOKEN).returncode == 0
    assert cli(hub, tmp_path, "remove", GATED).returncode == 0
    stored = cli(hub, tmp_path, "login", stdin=GOOD_TOKEN + "\n")
    assert stored.returncode == 0 and "token stored for listener" in stored.stderr
    assert (tmp_path / "token").read_text() == GOOD_TOKEN
    assert GOOD_TOKEN not in stored.stdout + stored.stderr
    assert cli(hub, tmp_path, "download", GATED).returncode == 0


def test_failures_are_one_line(hub, tmp_path):
    for args, words in ((("download", "someone/missing"), "someone/missing: no such model repository"),
                        (("login",), "no token given")):
        result = cli(hub, tmp_path, *args, stdin="\n")
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
