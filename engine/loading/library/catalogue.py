"""The models a user can talk with, as the library offers them, and which files of a
repository its family's loader needs."""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from pathlib import Path

from ...families import family_of


@dataclasses.dataclass(frozen=True)
class KnownModel:
    repo: str
    preset: str
    """The configuration it has (engine.config.lm.CONFIGS) when it ships no config.json ("": it ships one)."""
    about: str
    int8_repo: str | None = None
    """Its official int8 twin (Kyutai's `-q8` repositories): what the int8 choice downloads."""
    gated: bool = False
    """Its licence must be accepted on its Hub page, and the download needs a token."""


KNOWN_MODELS = (
    KnownModel("kyutai/moshiko-pytorch-bf16", "moshiko", "Moshi, Kyutai's full-duplex speech model, male voice "
               "(English)", int8_repo="kyutai/moshiko-pytorch-q8"),
    KnownModel("kyutai/moshika-pytorch-bf16", "moshika", "Moshi, female voice (English)",
               int8_repo="kyutai/moshika-pytorch-q8"),
    KnownModel("kyutai/moshiko-pytorch-q8", "moshiko", "Moshi, male voice, int8 weights: half the download and "
               "the memory"),
    KnownModel("kyutai/moshika-pytorch-q8", "moshika", "Moshi, female voice, int8 weights"),
    KnownModel("nvidia/personaplex-7b-v1", "personaplex", "PersonaPlex, NVIDIA's Moshi: a voice and a role you "
               "choose (English)", gated=True),
    KnownModel("openbmb/MiniCPM-o-4_5", "", "MiniCPM-o 4.5, OpenBMB's omni model in audio full duplex: it decides "
               "once a second to listen or to speak (English, Chinese); only its audio files are downloaded"),
)
KNOWN = {m.repo: m for m in KNOWN_MODELS}


def close_names(name: str, limit: int = 4) -> list[str]:
    """The known repositories a shortened or mistyped name may mean: those containing it
    ("moshiko"), else the closest ones, whole or without the owner (difflib's ratio)."""
    text = name.strip().lower()
    if not text:
        return []
    found = [m.repo for m in KNOWN_MODELS if text in m.repo.lower() and name.strip() != m.repo]
    if found:
        return found[:limit]
    ratios: dict[str, float] = {}
    for m in KNOWN_MODELS:
        for spelling in (m.repo.lower(), m.repo.split("/")[-1].lower()):
            ratio = difflib.SequenceMatcher(None, text, spelling).ratio()
            ratios[m.repo] = max(ratios.get(m.repo, 0.0), ratio)
    best = max(ratios.values())
    return sorted((r for r, ratio in ratios.items() if ratio >= max(_CLOSE, best - 0.03) and r != name.strip()),
                  key=lambda r: -ratios[r])[:limit]


_CLOSE = 0.75
"""difflib's ratio from which a known name counts as close (a letter or two mistyped)."""


def needed_files(listing: set[str], config: dict | None, weights: str | None, repo: str,
                 read: Callable[[str], object] | None = None) -> list[str]:
    """The files of a repository or folder (`listing`: every file name in it) that its family's
    loader reads, for `weights`; `read(name)` gives a small JSON file's contents where the family
    needs more than the listing (a sharded checkpoint's index). Raises ValueError naming what its
    layout lacks, CheckpointError when no family claims it (engine.families)."""
    return family_of(Path(repo), config or {}).files(listing, config or {}, weights, repo, read)
