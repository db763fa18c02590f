"""Locating model checkpoints: a directory, a Hugging Face cache snapshot, a repository name
found in the local Hugging Face cache, or "demo" (the bundled untrained model).

Nothing is downloaded unless the caller asks (`download=True`; the app and `duplexcadence
download` go through engine.loading.library, with progress). A snapshot counts as a model only when
it holds every file the loader needs: a download stopped half-way is not one.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import CheckpointError
from ..files.paths import DEMO_MODEL_DIR, LM_NAME, LM_Q8_NAME, file_in
from .library.catalogue import KNOWN_MODELS
from .library.local import missing_files

# Repositories we know the configuration of (used when a checkpoint has no config.json).
KNOWN_REPOS = {model.repo: model.preset for model in KNOWN_MODELS}
_REPO_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")


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
        unusable = _unusable_config(hf_cache_dir() / ("models--" + text.replace("/", "--")))
        if unusable:  # downloaded, but no model: downloading again would not help
            raise CheckpointError(f"{text}: {unusable}")
        raise CheckpointError(f"{text}: not downloaded yet ({hf_cache_dir()} has no complete copy); download it "
                              f"from the app's model list, or with `duplexcadence download {text}`")
    raise CheckpointError(f"{text}: no such directory, and not a repository name or 'demo'")


def lm_file(root: Path, meta: dict | None = None) -> Path:
    """The LM weights of a checkpoint directory: the file its config.json names, else
    `model.safetensors`, else the official q8 file `model.q8.safetensors`."""
    if meta and "moshi_name" in meta:
        return file_in(root, meta["moshi_name"], f"{root}/config.json", key="moshi_name")
    return root / LM_NAME if (root / LM_NAME).exists() or not (root / LM_Q8_NAME).exists() else root / LM_Q8_NAME


def _repo_of_cache_dir(path: Path) -> str | None:
    if not path.name.startswith("models--"):
        return None
    return path.name.removeprefix("models--").replace("--", "/", 1)


def _latest_snapshot(entry: Path) -> Path | None:
    """The snapshot `refs/main` points at, else the newest one, holding every file the loader
    needs."""
    snapshots = entry / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = entry / "refs" / "main"
    if ref.is_file():
        main = snapshots / ref.read_text().strip()
        if main.is_dir() and not missing_files(main):
            return main
    candidates = [p for p in snapshots.iterdir() if not missing_files(p)]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _unusable_config(entry: Path) -> str | None:
    """Why the config.json of the snapshot `refs/main` points at makes it no model, if it does."""
    try:
        main = entry / "snapshots" / (entry / "refs" / "main").read_text().strip()
    except OSError:
        return None
    prefix = "usable config.json ("
    missing = missing_files(main) if main.is_dir() else []
    return next((m[len(prefix):-1] for m in missing if m.startswith(prefix)), None)


def _download(repo: str) -> Path:
    from .library.hub_client import HubClient
    client = HubClient()
    return client.download(client.remote(repo))
