"""The window's words. The engine, its measurements and its papers have their terms (p99,
backbone, τ); a person talking with a model needs none of them to follow what the window says.
TERMS holds each term and the plain words the window shows instead; the term itself goes in
the tooltip (`tip`), for those who know it or look it up. tests/test_app_plain_words.py finds
none of the terms in the window's visible text."""
from __future__ import annotations

import re

TERMS = {
    "SPEAK time": "time to produce a second of speech",
    "headroom": "as fast as needed",
    "cadence": "on time",
    "p99": "99 in 100 within",
    "frame": "step",
    "overrun": "too slow",
    "backbone": "large model",
    "depformer": "small model",
    "encode": "hearing you",
    "decode": "making the sound",
    "policy": "large model runs",
    "AR": "every step",
    "LISTEN": "guess while listening",
    "SPEAK": "guess while speaking too",
    "wake": "run of the large model",
    "revision": "plan dropped",
    "τ": "confidence needed",
    "block K": "steps guessed at once",
    "verification": "checking guesses",
    "streaming state": "conversation memory",
    "queue": "waiting",
    "overflow": "microphone audio lost",
    "underflow": "gap in the speaker's audio",
    "CUDA graph": "faster GPU replay",
    "demand-sized": "memory grown as needed",
}
"""Technical term -> the plain words the window shows for it. A term in capitals is the
engine's name for something (the SPEAK policy) and is matched as written; the others in any
case, as words and their plurals."""

POLICIES = {"ar": "Every step", "listen": "Guess ahead while listening", "speak": "Guess ahead, speaking too"}
"""engine.POLICIES' values -> the choices' words (the engine's name for each is its tooltip)."""

TOGGLES = {"graph_replay": "Faster GPU replay", "demand_sized_state": "Memory grown as the conversation needs"}
"""engine.TOGGLES' names -> the switches' words."""

SWITCH_TERMS = {"graph_replay": ("CUDA graph",), "demand_sized_state": ("demand-sized",)}
"""engine.TOGGLES' names -> their TERMS."""
TOGGLE_TERMS = {"graph_replay": ("CUDA graph replay",), "demand_sized_state": ("demand-sized state",)}
"""How the engine's reasons name each switch (they begin with it: "CUDA graph replay needs …")."""

OPTIONS = {"graph_replay": TOGGLES["graph_replay"].lower(), "demand_sized_state": "memory grown as needed",
           "policy": "how often the large model runs", "text_temperature": "text temperature",
           "text_top_k": "text top-k", "audio_temperature": "audio temperature", "audio_top_k": "audio top-k",
           "greedy": "greedy", "seed": "seed", "tau": "confidence needed", "block": "steps guessed at once",
           "verify": "checking guesses"}
"""RuntimeOptions' fields -> their words, for saying what changed."""


def tip(text: str, *terms: str) -> str:
    """A tooltip: `text`, then each term beside its plain words (the terms must be in TERMS)."""
    return text + "\n" + "; ".join(f"{TERMS[term]}: {term}" for term in terms)


def pattern(term: str) -> re.Pattern:
    """Where `term` occurs in text as a word (or its plural, or -ed/-ing form)."""
    flags = 0 if term.isupper() else re.IGNORECASE
    start = r"(?<![\w-])" if term[0].isalnum() else ""
    return re.compile(start + re.escape(term) + (r"(?:s|es|ed|ing)?(?![\w-])" if term[-1].isalnum() else ""), flags)


def terms_in(text: str) -> list[str]:
    """The TERMS found in `text`."""
    return [term for term in TERMS if pattern(term).search(text)]


def reason(name: str, why: str) -> str:
    """An engine's reason a switch is unavailable, without the engine's name for the switch
    (shown beside the switch's own words): "CUDA graph replay needs a CUDA GPU" -> "needs a CUDA GPU"."""
    for term in TOGGLE_TERMS.get(name, ()):
        if why.lower().startswith(term.lower()):
            return why[len(term):].strip()
    return why
