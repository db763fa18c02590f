"""What a person sets of a conversation, for a model of any family: a voice among those the
model declares (DuplexSession.voices) and a text prompt (a role, a system prompt). A family
takes what it declares and refuses the rest in one line (FamilyConversation.check_persona)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Persona:
    voice: str | None = None
    role: str = ""
