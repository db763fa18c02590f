"""Model families: how each kind of model is recognised, loaded, planned for and conversed
with. A family is a package here that registers itself (`register_family`) when imported;
`families()` imports every package here once, so a new family is a new package and nothing
else. A family defined elsewhere (a plugin, a test) registers the same way. The registry, the
stage runner and the session name none of them."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

_FAMILIES: dict[str, Family] = {}
_SHIPPED_IMPORTED = False


@dataclasses.dataclass(frozen=True)
class Family:
    """What the runtime needs of a family, beyond its conversation's members
    (engine.families.protocol)."""
    name: str
    """What its loaded models give as `family`."""
    claims: Callable[[Path, dict], bool]
    """Whether a checkpoint folder (and its config.json's contents, {} without one) is this
    family's. Claims are disjoint: two families claiming one folder is an error."""
    load: Callable[..., Any]
    """(folder, repository name or None, device, dtype or None, weights or None) -> the loaded
    model (engine.families.protocol.DuplexModel)."""
    conversation: Callable[..., Any]
    """(model, generator, options, persona, predictor path or None) -> a new conversation
    (engine.families.protocol.FamilyConversation): its class, or a function making one."""
    plan_memory: Callable[..., Any]
    """(folder, repository name or None, weights or None, device) -> engine.loading.memory_plan.MemoryPlan,
    reading only the checkpoint's headers."""
    check_persona: Callable[..., None]
    """(folder, repository name or None, voice or None, role text): ValueError or
    CheckpointError in one line unless the model takes them; before its weights load."""
    files: Callable[..., list[str]]
    """(every file name in a repository or folder, its config.json's contents, weights or None,
    its name, `read`: a small JSON file of it by name -> its contents or None, or None where
    nothing can be read) -> the files its loader reads; ValueError naming what its layout lacks."""
    plan_config: Callable[..., Any] | None = None
    """(config.json's contents, name, weights or None, device) -> the MemoryPlan from the
    configuration alone (a model on the Hub, before its download), or None where it cannot
    say; None here: the family plans a repository its own way (the library asks it)."""


def register_family(family: Family) -> None:
    _FAMILIES[family.name] = family


def families() -> list[Family]:
    """Every registered family, those shipped in this package imported first."""
    global _SHIPPED_IMPORTED
    if not _SHIPPED_IMPORTED:
        for module in pkgutil.iter_modules(__path__):
            if module.ispkg:
                importlib.import_module(f"{__name__}.{module.name}")
        _SHIPPED_IMPORTED = True
    return list(_FAMILIES.values())


def family_named(name: str) -> Family:
    found = {family.name: family for family in families()}
    if name not in found:
        raise ValueError(f"no model family {name!r} is registered")
    return found[name]


def family_of(root: Path, meta: dict) -> Family:
    """The family whose checkpoint `root` is (CheckpointError naming the folder when none or
    more than one claims it)."""
    claiming = [family for family in families() if family.claims(root, meta)]
    if len(claiming) == 1:
        return claiming[0]
    if not claiming:
        kind = f" (model_type {meta['model_type']!r})" if isinstance(meta.get("model_type"), str) else ""
        raise CheckpointError(f"{root}: not a model any family here reads{kind}")
    raise CheckpointError(f"{root}: claimed by more than one model family ({', '.join(f.name for f in claiming)})")


def conversation_for(model: Any) -> Callable[..., Any]:
    """What makes a conversation with a loaded model (Family.conversation)."""
    return family_named(model.family).conversation
