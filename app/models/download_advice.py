"""What the window says when asking the Hub about a model, or downloading it, fails: the engine's
one line (what failed, and what to do about it), then what to do next in the window's own terms,
and whether pressing Download again can work as things are. Chosen by the failure's kind
(engine.HubError.reason; "twin" and "cancelled" are the window's own)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    next_step: str
    retry: bool         # Download again can work as things are (else it is disabled until they change)
    token: bool = False  # an access token is the way on: the Access token… button shows


ADVICE = {
    "network": Advice("When it is back, press Download again: the files already complete are kept.", True),
    "gated": Advice("Download is available again once a token is stored (Access token…).", False, True),
    "licence": Advice("Once it is accepted, press Download again.", True, True),
    "token": Advice("Give a new one with Access token…: Download is available again once it is stored.",
                    False, True),
    "not_found": Advice("Check the name (Hub name…), or choose another model.", False),
    "not_a_model": Advice("Choose another model.", False),
    "disk": Advice("Once there is room, press Download again: the files already complete are kept.", True),
    "server": Advice("Press Download again in a while.", True),
    "twin": Advice("Its official int8 files are not on this Hub: choose bf16 weights to download its bf16 files; "
                   "int8 or int4 can then still be chosen to load them (quantized while loading).", False),
    "cancelled": Advice("Finish download fetches the rest.", True),
    "other": Advice("Press Download to try again; the details are in the log (Help → Show log).", True),
}


def download_failure(name: str, message: str, reason: str) -> tuple[str, Advice]:
    """The window's text for a failure of `name` (the engine's `message`, of kind `reason`)."""
    advice = ADVICE.get(reason, ADVICE["other"])
    line = message.removeprefix(f"{name}: ").rstrip(".")
    return f"Could not download {name}: {line}. {advice.next_step}", advice
