"""MiniCPM-o 4.5's audio full duplex, the one-second family: a Whisper encoder streaming a
second at a time, the Qwen3 LLM deciding each second to listen or speak and writing the
unit's text, the TTS turning that text's hidden states into 25 speech tokens a second, and the
Step-Audio2 token2wav tail (engine.token2wav) turning them into 24 kHz audio. Vision is not
read. Its modules import torch only when the registry first asks for one of them."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register_family

FAMILY = "minicpmo"


def _claims(folder: Path, config: dict) -> bool:
    return config.get("model_type") == "minicpmo"  # layout.MODEL_TYPE, without importing torch here


def _load(*args, **kwargs):
    from .model import load
    return load(*args, **kwargs)


def _conversation(*args, **kwargs):
    from .conversation import MiniCPMOConversation
    return MiniCPMOConversation(*args, **kwargs)


def _plan_memory(*args, **kwargs):
    from .model import plan_memory
    return plan_memory(*args, **kwargs)


def _check_persona(folder: Path, repo: str | None, voice: str | None, role: str) -> None:
    if voice:
        raise ValueError(f"{repo or folder.name} speaks with its own voice here; it takes no voice choice yet")


def _files(listing, config: dict, weights: str | None, name: str, read=None) -> list[str]:
    from .layout import files
    return files(listing, config, read, name)


def _plan_config(*args, **kwargs):
    from .model import plan_config
    return plan_config(*args, **kwargs)


register_family(Family(FAMILY, _claims, _load, _conversation, _plan_memory, _check_persona, _files, _plan_config))
