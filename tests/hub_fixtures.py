"""Small Hub repositories made from the demo model, served by tests/fake_hub.py: a known bf16
model, its q8 twin (quantized by our exporter), a gated PersonaPlex-like one with voices.tgz,
and a repository that is not a duplex model."""
from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from engine.files.paths import DEMO_MODEL_DIR, LM_NAME, MIMI_NAME, TOKENIZER_NAME
from tests.fake_hub import FakeHub

BF16, Q8, GATED, NOT_A_MODEL = ("kyutai/moshiko-pytorch-bf16", "kyutai/moshiko-pytorch-q8",
                                "nvidia/personaplex-7b-v1", "someone/text-llm")
GOOD_TOKEN, STRANGER_TOKEN = "hf_accepted_licence", "hf_valid_not_accepted"


def demo_files() -> dict[str, Path]:
    return {p.name: p for p in sorted(DEMO_MODEL_DIR.iterdir()) if p.is_file()}


def voices_archive() -> bytes:
    """The demo's voice prompts packed as PersonaPlex releases them (voices/*.pt in voices.tgz)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted((DEMO_MODEL_DIR / "voices").glob("*.pt")):
            tar.add(path, arcname=f"voices/{path.name}")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def q8_folder(tmp_path_factory) -> Path:
    from engine import export_q8
    return export_q8("demo", tmp_path_factory.mktemp("q8") / "demo-q8", "cpu").parent


@pytest.fixture()
def hub(q8_folder):
    """A fake Hub with the four repositories; each test gets a fresh server."""
    with FakeHub() as server:
        server.add_repo(BF16, {**demo_files(), "README.md": b"# demo as moshiko\n"})
        server.add_repo(Q8, {p.name: p for p in q8_folder.iterdir() if p.is_file()})
        gated = {name: path for name, path in demo_files().items() if name != "diffuplex.safetensors"}
        server.add_repo(GATED, {**gated, "voices.tgz": voices_archive()}, gated=True)
        server.add_repo(NOT_A_MODEL, {LM_NAME: (DEMO_MODEL_DIR / LM_NAME), "README.md": b"an LLM\n"})
        server.accept_token(GOOD_TOKEN, "listener", accepted=(GATED,))
        server.accept_token(STRANGER_TOKEN, "stranger")
        yield server



REPO_ROOT = Path(__file__).resolve().parent.parent
INSTALLED = Path(sys.executable).with_name("duplexcadence")


def duplexcadence(hub, home: Path, *args, token: str | None = None, stdin: str | None = None,
                  env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    """The installed `duplexcadence` command, as a user runs it, against `hub` (HF_ENDPOINT) with
    its cache and token under `home` (HF_HOME); this checkout's code first on its path."""
    assert INSTALLED.is_file(), f"{INSTALLED}: the project is not installed in this environment"
    return subprocess.run([str(INSTALLED), *args], capture_output=True, text=True, input=stdin, timeout=300,
                          env=cli_env(hub, home, token, env), **popen)


def cli_env(hub, home: Path, token: str | None = None, env: dict | None = None) -> dict:
    out = {**os.environ, "HF_ENDPOINT": hub.endpoint if hub is not None else "http://127.0.0.1:9",
           "HF_HOME": str(home), "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    out.pop("HF_TOKEN", None)
    if token:
        out["HF_TOKEN"] = token
    return out


def tiny_model(lm: bytes = b"L" * 4096, **more: bytes) -> dict[str, bytes]:
    """A repository in the official layout whose files are a few kilobytes of filler: enough to
    download, list and remove (nothing loads it)."""
    return {"config.json": b"{}", LM_NAME: lm, TOKENIZER_NAME: b"T" * 2048, MIMI_NAME: b"M" * 3072, **more}


def bytes_in(folder: Path) -> int:
    """The bytes the files in `folder` hold, each file once (links are not counted)."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def cache_folder(cache: Path, repo: str) -> Path:
    """Where the client keeps a model repository in its cache (models--owner--name)."""
    return cache / ("models--" + repo.replace("/", "--"))
