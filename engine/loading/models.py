"""Loading a model of any family: the place it is named by (a folder, a Hugging Face cache
snapshot or repository, "demo": engine.loading.locate) resolved to a folder, the family that claims the
folder found (engine.families), and that family asked to plan, check or load it."""
from __future__ import annotations

from pathlib import Path

import torch

from ..config.checks import read_json
from ..families import Family, family_of
from ..families.protocol import DuplexModel
from . import locate
from .memory_plan import MemoryPlan


def _family(path_or_name: str | Path, download: bool = False) -> tuple[Family, Path, str | None]:
    root, repo = locate.resolve(path_or_name, download=download)
    config = root / "config.json"
    return family_of(root, read_json(config) if config.exists() else {}), root, repo


def load_model(path_or_name: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
               download: bool = False, weights: str | None = None) -> DuplexModel:
    """A directory with the official files of a family, a Hugging Face cache snapshot, a
    repository name found in the local cache (or fetched, with download=True), or "demo".

    dtype: the activations' and float weights' (default: the family's for the device);
    `weights`: "int8", "int4" or "bf16" as the family can load them, None as the files hold
    them. Any problem raises CheckpointError naming the file."""
    family, root, repo = _family(path_or_name, download)
    return family.load(root, repo, torch.device(device), dtype, weights)


def plan_memory(path_or_name: str | Path, weights: str | None, device: str | torch.device) -> MemoryPlan:
    """The memory `load_model(path_or_name, device, weights=weights)` and a session need, from
    the checkpoint's headers."""
    family, root, repo = _family(path_or_name)
    return family.plan_memory(root, repo, weights, device)


def check_persona(path_or_name: str | Path, voice: str | None, role: str) -> None:
    """Before a model's weights load: raise (one line) unless it takes this voice and role."""
    family, root, repo = _family(path_or_name)
    family.check_persona(root, repo, voice, role)
