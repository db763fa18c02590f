"""Small Hub repositories made from the demo model, served by tests/fake_hub.py: a known bf16
model, its q8 twin (quantized by our exporter), a gated PersonaPlex-like one with voices.tgz,
and a repository that is not a duplex model."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from engine.paths import DEMO_MODEL_DIR, LM_NAME
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

