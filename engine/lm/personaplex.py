"""PersonaPlex prompts as data: voice prompt files (`voices/*.pt`), the role prompt's wrapping,
and the reference's defaults. engine/prompts.py plays them to the model."""
from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import torch

from ..config.lm import LMConfig
from ..errors import CheckpointError

UNGENERATED = -2
"""The reference's marker for a cache slot never written (a very short voice prompt)."""
DEFAULT_ROLE = ("You are a wise and friendly teacher. Answer questions or provide advice "
                "in a clear and engaging way.")
"""The reference offline runner's default role prompt."""
SILENCE_FRAMES = 6
"""Half a second of 12.5 Hz frames (the reference's int(0.5 * frame_rate))."""


@dataclasses.dataclass(frozen=True)
class VoicePrompt:
    name: str
    embeddings: torch.Tensor
    """[T, 1, 1, dim]: the input embedding of each voice-prompt frame."""
    cache: torch.Tensor
    """[slots, n_q + 1]: the delay lines' tokens after the voice prompt."""


def load_voice(path: str | Path, cfg: LMConfig, device: torch.device, dtype: torch.dtype) -> VoicePrompt:
    """Read a `voices/*.pt` file ({"embeddings", "cache"}); only tensors are unpickled."""
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable voice prompt ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a dict with keys 'embeddings' and 'cache'")
    for key in ("embeddings", "cache"):
        if not isinstance(data.get(key), torch.Tensor):
            raise CheckpointError(f"{path}: missing tensor key {key}")
    emb, cache = data["embeddings"], data["cache"]
    if emb.dim() != 4 or emb.shape[1:3] != (1, 1) or emb.shape[3] != cfg.dim or emb.shape[0] == 0:
        raise CheckpointError(f"{path}: key embeddings has shape {list(emb.shape)}, expected [T, 1, 1, {cfg.dim}]")
    if not emb.dtype.is_floating_point:
        raise CheckpointError(f"{path}: key embeddings has dtype {emb.dtype}, expected floating point")
    # Checked in the model's dtype: a large float32 value is infinite in float16.
    emb = emb.to(dtype=dtype)
    bad = int(emb.numel() - torch.isfinite(emb).sum())
    if bad:
        raise CheckpointError(f"{path}: key embeddings holds {bad} NaN or infinite values")
    slots = cfg.max_delay + 3
    if tuple(cache.shape) != (1, cfg.n_q + 1, slots) or cache.dtype != torch.int64:
        raise CheckpointError(f"{path}: key cache has shape {list(cache.shape)} ({cache.dtype}), "
                              f"expected [1, {cfg.n_q + 1}, {slots}] int64")
    cache = cache[0].T
    limits = torch.tensor([cfg.text_card] + [cfg.card] * cfg.n_q)
    if ((cache < UNGENERATED) | (cache > limits)).any():
        raise CheckpointError(f"{path}: key cache holds tokens outside the vocabularies")
    return VoicePrompt(path.stem, emb.to(device=device), cache.contiguous().to(device))


def wrap_role(text: str) -> str:
    """The role prompt as the model was trained to see it."""
    cleaned = text.strip()
    if cleaned.startswith("<system>") and cleaned.endswith("<system>"):
        return cleaned
    return f"<system> {cleaned} <system>"
