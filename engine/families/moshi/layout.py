"""The official layout of a Moshi-family repository: which of its files the loader reads."""
from __future__ import annotations

from pathlib import Path

from ...files.paths import LM_NAME, LM_Q8_NAME, MIMI_NAME, PREDICTOR_NAME, TOKENIZER_NAME, file_in

OPTIONAL_FILES = ("voices.tgz", PREDICTOR_NAME, "mimi_config.json")
"""Downloaded when a repository has them: PersonaPlex's voice prompts, a DiffuPlex predictor
of ours, our Mimi configuration."""


def files(listing: set[str], config: dict, weights: str | None, repo: str) -> list[str]:
    """The files of a repository (`listing`: every file name in it) that `load` reads, for
    `weights` ("int8", "int4": the int8 file where the repository has one). Raises ValueError
    naming what the official layout lacks."""
    for key in ("moshi_name", "mimi_name", "tokenizer_name"):
        if key in config:
            file_in(Path(), config[key], f"{repo}/config.json", key=key)  # raises for a path out of it
    if "moshi_name" in config:
        lm = config["moshi_name"]
    elif weights in ("int8", "int4") and LM_Q8_NAME in listing or LM_NAME not in listing:
        lm = LM_Q8_NAME
    else:
        lm = LM_NAME
    required = [lm, config.get("mimi_name", MIMI_NAME), config.get("tokenizer_name", TOKENIZER_NAME)]
    missing = [name for name in required if name not in listing]
    if missing:
        raise ValueError(f"{repo}: not a duplex speech model in the official layout (it has no "
                         f"{', '.join(missing)})")
    extra = ["config.json"] if "config.json" in listing else []
    return extra + required + [name for name in OPTIONAL_FILES if name in listing]

