"""Model families: how one step of each kind of model runs, as stages the generic runner
(engine.runtime.stages) ticks, runs and replays. A family registers its conversation
(engine.families.protocol) under the name its loaded models give as `family`; the registry, the
runner and the session know none of them by name."""
from __future__ import annotations

import importlib
from typing import Any

_FAMILIES: dict[str, type] = {}


def register_family(name: str, conversation: type) -> None:
    """Models whose `family` is `name` converse through `conversation`."""
    _FAMILIES[name] = conversation


def conversation_for(model: Any) -> type:
    """The conversation class of a loaded model's family. A family shipped in this package
    registers itself when its package (named as the family) is first imported."""
    name = model.family
    if name not in _FAMILIES:
        package = f"{__name__}.{name}"
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as exc:
            if exc.name != package:
                raise
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"{model.name}: no model family {name!r} is registered") from None
