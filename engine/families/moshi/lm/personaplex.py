"""PersonaPlex prompts as data: voice prompt files (`voices/*.pt`), the role prompt's wrapping,
and the reference's defaults. engine/prompts.py plays them to the model."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ....errors import CheckpointError
from ....loading.pt_files import load_pt
from .lm_config import LMConfig

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
    data = load_pt(path, "voice prompt")  # mapped: a long prompt is refused before it is read
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
    if emb.shape[0] > cfg.context:  # its start would be gone from the model's window before it ends
        raise CheckpointError(f"{path}: a voice prompt of {emb.shape[0]} frames, longer than the model's "
                              f"{cfg.context}-frame context (with a role, at most {cfg.context // 2} frames in all)")
    # Checked in the model's dtype: a large float32 value is infinite in float16.
    emb = emb.to(dtype=dtype, copy=True)  # a copy: the file is only mapped
    bad = int(emb.numel() - torch.isfinite(emb).sum())
    if bad:
        raise CheckpointError(f"{path}: key embeddings holds {bad} NaN or infinite values")
    slots = cfg.max_delay + 3
    if tuple(cache.shape) != (1, cfg.n_q + 1, slots) or cache.dtype != torch.int64:
        raise CheckpointError(f"{path}: key cache has shape {list(cache.shape)} ({cache.dtype}), "
                              f"expected [1, {cfg.n_q + 1}, {slots}] int64")
    cache = cache[0].T.clone()
    limits = torch.tensor([cfg.text_card] + [cfg.card] * cfg.n_q)
    if ((cache < UNGENERATED) | (cache > limits)).any():
        raise CheckpointError(f"{path}: key cache holds tokens outside the vocabularies")
    return VoicePrompt(path.stem, emb.to(device=device), cache.contiguous().to(device))


def prompt_frames(voice_frames: int, role_tokens: int) -> int:
    """Frames the prompts' replay plays (engine/families/moshi/prompts.py): the voice prompt,
    half a second of silence, the role a token a frame, half a second again."""
    return voice_frames + SILENCE_FRAMES + role_tokens + SILENCE_FRAMES


def check_prompt_length(cfg: LMConfig, voice: str | None, voice_frames: int, role_tokens: int) -> None:
    """ValueError in one line unless the prompts take at most half the model's context: the
    rest is the conversation's, and a longer prompt takes minutes to play."""
    total, limit = prompt_frames(voice_frames, role_tokens), cfg.context // 2
    if total > limit:
        voice_part = f"voice prompt {voice} ({voice_frames} frames)" if voice else "no voice prompt"
        raise ValueError(f"the prompts are too long for {cfg.name}: {voice_part} and a role of {role_tokens} "
                         f"tokens take {total} frames with their {2 * SILENCE_FRAMES} of silence; at most {limit} "
                         f"(half the model's {cfg.context}-frame context): shorten the role or pick another voice")


def wrap_role(text: str) -> str:
    """The role prompt as the model was trained to see it."""
    cleaned = text.strip()
    if cleaned.startswith("<system>") and cleaned.endswith("<system>"):
        return cleaned
    return f"<system> {cleaned} <system>"
