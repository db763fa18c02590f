"""Every model a user can pick, in one list: the built-in demo, the known Hub models (on this
machine or not), other models in the Hugging Face cache, and checkpoint folders; and, for
one not downloaded yet, what downloading it means (which repository, how much, whether it
fits this machine)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CheckpointError
from ..paths import DEMO_MODEL_DIR
from .catalogue import KNOWN, KNOWN_MODELS
from .hub_client import HubClient, RemoteModel
from .local import cached_models, missing_files

if TYPE_CHECKING:
    import torch

READY, PARTIAL, REMOTE = "ready", "partly downloaded", "not downloaded"
INT4_ON_LOAD = ("they are quantized to int4 each time the model loads (`duplexcadence quantize --weights int4` "
                "writes them once, as a folder that loads as it is)")


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    name: str
    """What `load_model` takes: "demo", a repository name, or a folder."""
    about: str
    origin: str
    """"built in", "Hugging Face" or "folder"."""
    state: str
    """READY, PARTIAL (a download to finish) or REMOTE."""
    location: Path | None
    size_on_disk: int = 0
    gated: bool = False


def list_models(cache_dir: str | Path, folders: list[str] = ()) -> list[ModelEntry]:
    """Folders that are not (or no longer) complete checkpoints are left out."""
    entries = [ModelEntry("demo", "Built-in demo: untrained, for trying the app (it babbles)", "built in", READY,
                          DEMO_MODEL_DIR, _folder_size(DEMO_MODEL_DIR))]
    cached = {c.repo: c for c in cached_models(cache_dir)}
    for model in KNOWN_MODELS:
        entries.append(_hub_entry(model.repo, model.about, cached.pop(model.repo, None), model.gated))
    for repo, found in cached.items():
        entries.append(_hub_entry(repo, "A model from the Hugging Face Hub", found, False))
    for folder in folders:
        path = Path(folder)
        if path.is_dir() and not missing_files(path):
            entries.append(ModelEntry(str(path), "A checkpoint folder", "folder", READY, path, _folder_size(path)))
    return entries


def _hub_entry(repo: str, about: str, cached, gated: bool) -> ModelEntry:
    state = REMOTE if cached is None else READY if cached.complete else PARTIAL
    return ModelEntry(repo, about, "Hugging Face", state, cached.snapshot if cached else None,
                      cached.size_on_disk if cached else 0, gated)


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@dataclasses.dataclass(frozen=True)
class DownloadPlan:
    """What downloading a model for a choice of weights fetches, and whether it then fits."""
    remote: RemoteModel
    weights: str
    """"bf16", "int8" or "int4", as loading will use them."""
    note: str
    """What the weights choice downloads ("the official int8 files of …", "the bf16 files,
    quantized each time the model loads")."""
    to_download: int
    """Bytes not in the cache yet."""
    memory: object | None
    """engine.memory_plan.MemoryPlan, or None when the model's shape cannot be known before
    downloading (a gated repository without access)."""


def plan_download(client: HubClient, name: str, weights: str | None, device: str | torch.device) -> DownloadPlan:
    """Asks the Hub (raises HubError); `weights` None: as the repository holds them."""
    repo, note = name, ""
    twin = KNOWN[name].int8_repo if name in KNOWN else None
    if weights == "int8" and twin:
        repo, note = twin, f"int8: downloads {twin}, the official int8 files"
    if weights == "int4" and twin:  # half the download; int4 from int8 rows errs 0.5% more than from bf16
        repo, note = twin, f"int4: downloads {twin}, the official int8 files; {INT4_ON_LOAD}"
    remote = client.remote(repo, weights)
    lm_is_q8 = any(f.endswith(".q8.safetensors") for f in remote.files)
    chosen = weights or ("int8" if lm_is_q8 else "bf16")
    if chosen == "int8" and not lm_is_q8:
        note = "int8: downloads the bf16 files; they are quantized each time the model loads"
    if chosen == "int4" and not note:
        note = f"int4: downloads the {'int8' if lm_is_q8 else 'bf16'} files; {INT4_ON_LOAD}"
    return DownloadPlan(remote, chosen, note, remote.size - client.cached_bytes(remote),
                        _memory(client, remote, chosen, device))


def _memory(client: HubClient, remote: RemoteModel, weights: str, device):
    from ..duplex_model import lm_config
    from ..memory_plan import plan_for_config
    from ..paths import MIMI_NAME
    config, lm = remote.config or {}, max(remote.files, key=remote.files.get)
    names: list[str] | None = []
    if "dim" not in config and remote.repo not in KNOWN:
        # Its depformer steps say which 7B shape it is, as the loader decides: read from the
        # LM file's header on the Hub (ranged reads, no download).
        names = client.tensor_names(remote, lm)
        if names is None:
            return None
    try:
        cfg = lm_config(config, Path(remote.repo), remote.repo, remote.repo, names, Path(remote.repo) / lm)
        return plan_for_config(remote.repo, cfg, weights, device, remote.files.get(
            config.get("mimi_name", MIMI_NAME), 0))
    except CheckpointError:
        return None
