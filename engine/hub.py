"""Locating model checkpoints: a directory, a Hugging Face cache snapshot, a repository name
found in the local Hugging Face cache, or "demo" (the bundled untrained model).

Nothing is downloaded unless the caller asks (`download=True`).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from .errors import CheckpointError
from .paths import DEMO_MODEL_DIR, LM_NAME, LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME

# Repositories we know the configuration of (used when a checkpoint has no config.json).
KNOWN_REPOS = {
    "kyutai/moshiko-pytorch-bf16": "moshiko",
    "kyutai/moshika-pytorch-bf16": "moshika",
    "kyutai/moshiko-pytorch-q8": "moshiko",
    "kyutai/moshika-pytorch-q8": "moshika",
    "nvidia/personaplex-7b-v1": "personaplex",
}
_REPO_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclasses.dataclass(frozen=True)
class LocalCheckpoint:
    name: str
    """What to show and what `load_model` accepts: "demo", a repo name, or a directory."""
    path: Path
    repo: str | None = None


def hf_cache_dir() -> Path:
    from huggingface_hub import constants
    return Path(constants.HF_HUB_CACHE)


def resolve(path_or_name: str | Path, download: bool = False) -> tuple[Path, str | None]:
    """The directory holding a checkpoint's files, and its repository name when known."""
    text = str(path_or_name)
    if text == "demo":
        return DEMO_MODEL_DIR, None
    path = Path(text).expanduser()
    if path.is_file():
        path = path.parent
    if path.is_dir():
        if path.name.startswith("models--"):
            snapshot = _latest_snapshot(path)
            if snapshot is None:
                raise CheckpointError(f"{path}: Hugging Face cache entry without a snapshot")
            return snapshot, _repo_of_cache_dir(path)
        repo = _repo_of_cache_dir(path.parent.parent) if path.parent.name == "snapshots" else None
        return path, repo
    if _REPO_NAME.match(text):
        snapshot = _latest_snapshot(hf_cache_dir() / ("models--" + text.replace("/", "--")))
        if snapshot is not None:
            return snapshot, text
        if download:
            return _download(text), text
        raise CheckpointError(f"{text}: not in the local Hugging Face cache ({hf_cache_dir()}); download it "
                              "first (`duplexcadence offline --download`, or load_model(..., download=True))")
    raise CheckpointError(f"{text}: no such directory, and not a repository name or 'demo'")


def find_local_checkpoints() -> list[LocalCheckpoint]:
    """The demo model, then every cached Hugging Face snapshot holding a duplex checkpoint."""
    found = [LocalCheckpoint("demo", DEMO_MODEL_DIR)] if (DEMO_MODEL_DIR / LM_NAME).exists() else []
    cache = hf_cache_dir()
    if cache.is_dir():
        for entry in sorted(cache.glob("models--*")):
            snapshot = _latest_snapshot(entry)
            if snapshot is not None and _is_duplex(snapshot):
                repo = _repo_of_cache_dir(entry)
                found.append(LocalCheckpoint(repo, snapshot, repo))
    return found


def _is_duplex(snapshot: Path) -> bool:
    """Many models ship a model.safetensors; ours come with a Mimi codec, or an LM config
    that names one."""
    if (snapshot / MIMI_NAME).exists():
        return True
    try:
        return '"mimi_name"' in (snapshot / "config.json").read_text()
    except (OSError, UnicodeDecodeError):
        return False


def lm_file(root: Path, meta: dict | None = None) -> Path:
    """The LM weights of a checkpoint directory: the file its config.json names, else
    `model.safetensors`, else the official q8 file `model.q8.safetensors`."""
    if meta and "moshi_name" in meta:
        return root / meta["moshi_name"]
    return root / LM_NAME if (root / LM_NAME).exists() or not (root / LM_Q8_NAME).exists() else root / LM_Q8_NAME


def _repo_of_cache_dir(path: Path) -> str | None:
    if not path.name.startswith("models--"):
        return None
    return path.name.removeprefix("models--").replace("--", "/", 1)


def _latest_snapshot(entry: Path) -> Path | None:
    """The snapshot `refs/main` points at, else the newest one, holding the LM weights."""
    snapshots = entry / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = entry / "refs" / "main"
    if ref.is_file():
        main = snapshots / ref.read_text().strip()
        if lm_file(main).exists():
            return main
    candidates = [p for p in snapshots.iterdir() if lm_file(p).exists()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _download(repo: str) -> Path:
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(repo, allow_patterns=[
            LM_NAME, LM_Q8_NAME, MIMI_NAME, TOKENIZER_NAME, "config.json", "mimi_config.json", "voices.tgz"]))
    except Exception as exc:  # network, auth, gated repo: all are "cannot get this checkpoint"
        raise CheckpointError(f"{repo}: download failed ({exc})") from None
