"""Model families: how one frame (or chunk) of each kind of model runs, as stages the generic
runner (engine.runtime.stages) ticks, runs and replays. A family brings its stages; the runner
and the session know none of them by name."""
from __future__ import annotations

from typing import Any


def conversation_for(model: Any) -> type:
    """The conversation class of a loaded model's family (a new family: its package here and a
    line below)."""
    from .moshi.conversation import MoshiConversation

    families = {"moshi": MoshiConversation}
    return families[model.family]
