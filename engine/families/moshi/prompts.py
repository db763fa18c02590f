"""Playing PersonaPlex's prompts to the model before a conversation starts: a voice prompt
replayed from its saved embeddings, then a text role prompt, one token per frame.

Order and content follow NVIDIA/personaplex `LMGen.step_system_prompts`: the voice prompt
(each saved per-frame input embedding fed in place of the summed token embeddings, with
dummy start tokens forced on every stream, then the saved token cache restored), half a
second of silence, the role prompt wrapped in `<system>` tags (model audio = a silent frame,
user audio = a tone frame, text = the prompt token), and half a second of silence again.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .frame import MoshiFrame
from .inputs import LMInputs
from .lm.personaplex import SILENCE_FRAMES, VoicePrompt, prompt_frames


def replay_prompts(frame: MoshiFrame, voice: VoicePrompt | None, role_tokens: list[int],
                   cancelled: Callable[[], bool] = lambda: False,
                   progress: Callable[[int, int], None] | None = None) -> bool:
    """Run the voice and role prompts through the model, a frame at a time. Returns False if
    `cancelled()` turned true first (checked every frame: a voice prompt can take seconds);
    `progress(done, total)` is told after each frame."""
    lm, cfg = frame.lm, frame.cfg
    dev = lm.device
    voice_frames = 0 if voice is None else len(voice.embeddings)
    total, done = prompt_frames(voice_frames, len(role_tokens)), 0

    def played() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    def codes(values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=dev)

    pad = codes([cfg.text_padding_id])
    if voice is not None:
        start = codes([cfg.card] * cfg.model_q)
        for embedding in voice.embeddings:
            if cancelled():
                return False
            frame.prompt_frame(LMInputs(start, model=start, text=pad, embedding=embedding))
            played()
        lm.lines.load_cache(frame.runner.store, voice.cache)
    sine, silence = codes(cfg.sine_tokens), codes(cfg.silence_tokens)
    for token in [None] * SILENCE_FRAMES + list(role_tokens) + [None] * SILENCE_FRAMES:
        if cancelled():
            return False
        frame.prompt_frame(LMInputs(sine, model=silence, text=pad if token is None else codes([token])))
        played()
    return True
