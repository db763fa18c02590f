"""Every model a user can pick, in one list: the built-in demo, the known Hub models (on this
machine or not), other models in the Hugging Face cache, and checkpoint folders; and, for
one not downloaded yet, what downloading it means (which repository, how much, whether it
fits this machine)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import CheckpointError, HubError
from ...families import family_of
from ...files.paths import DEMO_MODEL_DIR
from ...weights.int4_copies import KeptCopy, copies_folder, copies_of, read_header
from .. import locate
from .catalogue import KNOWN, KNOWN_MODELS
from .hub_client import HubClient, RemoteModel
from .local import cached_models, local_config, missing_files
from .progress import size_text

if TYPE_CHECKING:
    import torch

READY, PARTIAL, REMOTE = "ready", "partly downloaded", "not downloaded"


def int4_kept_text() -> str:
    """What an int4 choice does with files that are not int4 (engine.weights.int4_kept)."""
    return f"they are quantized to int4 once, on the first int4 load, and the int4 copy kept in {copies_folder()}"


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
    lm_weights: str = ""
    """What its LM file holds (its header says): "bf16" (or another float dtype), "int8" (q8)
    or "int4"; "" when not on this machine."""
    kept_copies: tuple[KeptCopy, ...] = ()
    """The quantized copies kept of its weight files (engine.weights.int4_copies), once a load
    made one (a copy per format and kind of device it loaded on)."""

    @property
    def int4_note(self) -> str:
        """What int4 weights are for a model on this machine ("" for one that is not)."""
        if not self.lm_weights:
            return ""
        if self.lm_weights == "int4":
            return "int4: as its files hold them"
        if self.kept_copies:
            kept = "; ".join(f"{size_text(c.size_on_disk)} at {c.path}" for c in self.kept_copies)
            return f"int4: quantized once from its {self.lm_weights} files and kept: {kept}"
        return (f"int4: from its {self.lm_weights} files, quantized once on the first int4 load and kept in "
                f"{copies_folder()}")

    def weights_note(self, weights: str) -> str:
        """What loading it in `weights` does with its files on this machine ("" for nothing to
        say): Moshi's int4 (int4_note), or the copy a sharded checkpoint's load kept."""
        if weights == "int4" and self.lm_weights:
            return self.int4_note
        kept = [c for c in self.kept_copies if c.weights == weights]
        if not kept:
            return ""
        return f"{weights}: quantized once and kept: " + "; ".join(f"{size_text(c.size_on_disk)} at {c.path}"
                                                                   for c in kept)


def list_models(cache_dir: str | Path, folders: list[str] = ()) -> list[ModelEntry]:
    """Folders that are not (or no longer) complete checkpoints are left out."""
    entries = [ModelEntry("demo", "Built-in demo: untrained, for trying the app (it babbles)", "built in", READY,
                          DEMO_MODEL_DIR, _folder_size(DEMO_MODEL_DIR), **_weights_on_disk(DEMO_MODEL_DIR))]
    cached = {c.repo: c for c in cached_models(cache_dir)}
    for model in KNOWN_MODELS:
        entries.append(_hub_entry(model.repo, model.about, cached.pop(model.repo, None), model.gated))
    for repo, found in cached.items():
        entries.append(_hub_entry(repo, "A model from the Hugging Face Hub", found, False))
    for folder in folders:
        path = Path(folder)
        if path.is_dir() and not missing_files(path):
            entries.append(ModelEntry(str(path), "A checkpoint folder", "folder", READY, path, _folder_size(path),
                                      **_weights_on_disk(path)))
    return entries


def _hub_entry(repo: str, about: str, cached, gated: bool) -> ModelEntry:
    state = REMOTE if cached is None else READY if cached.complete else PARTIAL
    return ModelEntry(repo, about, "Hugging Face", state, cached.snapshot if cached else None,
                      cached.size_on_disk if cached else 0, gated,
                      **(_weights_on_disk(cached.snapshot) if state == READY else {}))


def _weights_on_disk(folder: Path) -> dict:
    """What a complete model's LM file holds and the copies kept of it, as ModelEntry's fields (a
    sharded checkpoint's copies are named after its index: engine.families.minicpmo.kept_weights)."""
    try:
        lm = locate.lm_file(folder, local_config(folder))
    except CheckpointError:  # a config.json naming a file out of the folder: no model, said on loading
        return {}
    if not lm.exists() and (folder / SHARD_INDEX).is_file():
        return {"kept_copies": tuple(copies_of(folder / SHARD_INDEX))}
    weights = _held(lm)
    return {"lm_weights": weights, "kept_copies": tuple(copies_of(lm)) if weights not in ("", "int4") else ()}


SHARD_INDEX = "model.safetensors.index.json"
_FLOATS = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def _held(lm: Path) -> str:
    """The weights an LM file holds, from its header: "int4" (our layout), "int8" (q8), the
    float dtype most of its tensors have; "" for a file that cannot be read."""
    try:
        header = read_header(lm)
    except (OSError, ValueError):
        return ""
    tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    if any(k.endswith("_int4_scale") for k in tensors):
        return "int4"
    if any(k.endswith("_scb") for k in tensors):
        return "int8"
    floats = [_FLOATS[v.get("dtype")] for v in tensors.values() if v.get("dtype") in _FLOATS]
    return max(set(floats), key=floats.count) if floats else ""


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
    quantized to int4 once and kept")."""
    to_download: int
    """Bytes not in the cache yet."""
    memory: object | None
    """engine.loading.memory_plan.MemoryPlan, or None when the model's shape cannot be known before
    downloading (a gated repository without access)."""


def plan_download(client: HubClient, name: str, weights: str | None, device: str | torch.device) -> DownloadPlan:
    """Asks the Hub (raises HubError); `weights` None: as the repository holds them."""
    repo, note = name, ""
    twin = KNOWN[name].int8_repo if name in KNOWN else None
    if weights == "int8" and twin:
        repo, note = twin, f"int8: downloads {twin}, the official int8 files"
    if weights == "int4" and twin:  # half the download; int4 from int8 rows errs 0.5% more than from bf16
        repo, note = twin, f"int4: downloads {twin}, the official int8 files; {int4_kept_text()}"
    try:
        remote = client.remote(repo, weights)
    except HubError as exc:
        if repo == name or exc.reason != "not_found":
            raise
        raise HubError(f"{name}: its int8 twin {repo} is not on {client.endpoint}; choose bf16 weights to download "
                       f"{name} itself", "not_found") from None
    if repo != name:  # the twin belongs to this entry: removing the entry removes it
        remote = dataclasses.replace(remote, entry=name)
    lm_is_q8 = any(f.endswith(".q8.safetensors") for f in remote.files)
    chosen = weights or ("int8" if lm_is_q8 else "bf16")
    planned = _planned_by_family(remote, chosen, device)
    if planned is not None:  # a family that plans from its config (and keeps what it quantizes)
        note = (f"{chosen}: downloads the bf16 files; they are quantized to {chosen} once, on the first {chosen} "
                f"load, and the copy kept in {copies_folder()}") if chosen != "bf16" else ""
        return DownloadPlan(remote, chosen, note, remote.size - client.cached_bytes(remote), planned[0])
    if chosen == "int8" and not lm_is_q8:
        note = "int8: downloads the bf16 files; they are quantized each time the model loads"
    if chosen == "int4" and not note:
        note = f"int4: downloads the {'int8' if lm_is_q8 else 'bf16'} files; {int4_kept_text()}"
    return DownloadPlan(remote, chosen, note, remote.size - client.cached_bytes(remote),
                        _memory(client, remote, chosen, device))


def _planned_by_family(remote: RemoteModel, weights: str, device) -> tuple | None:
    """(the plan or None) where the repository's family plans from its config.json alone; None
    where it does not (Moshi's: `_memory`)."""
    if remote.config is None:
        return None
    try:
        family = family_of(Path(remote.repo), remote.config)
    except CheckpointError:
        return None
    if family.plan_config is None:
        return None
    return (family.plan_config(remote.config, remote.repo, weights, device),)


def _memory(client: HubClient, remote: RemoteModel, weights: str, device):
    from ...families.moshi.memory import plan_for_config
    from ...families.moshi.model import lm_config
    from ...files.paths import MIMI_NAME
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
