"""One frame of LM generation: write the outside tokens, run the temporal transformer, sample
the text token, run the depformer codebook by codebook, commit, and read the output.

Follows the reference `LMGen.step` of moshi 0.2.13 (Moshi) and of NVIDIA's PersonaPlex fork
(teacher forcing through the delay lines, and one extra start-up frame); see `delays.py`.
The only host-side state is the frame count, which decides when output starts.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..state import StateStore
from .model import MoshiLM
from .sampling import SamplingParams, sample


def _no_mark(stage: str) -> None:
    pass


class LMStepper:
    def __init__(self, lm: MoshiLM, store: StateStore, text: SamplingParams, audio: SamplingParams,
                 generator: torch.Generator | None):
        self.lm, self.store = lm, store
        self.text, self.audio, self.generator = text, audio, generator
        self.frames = 0
        self.inputs: list[torch.Tensor] | None = None
        """When a list, each frame's input embedding is appended (to save a voice prompt)."""

    def reset(self) -> None:
        """Forget the host-side frame count (the caller resets the store)."""
        self.frames = 0

    @property
    def started(self) -> bool:
        return self.frames > self.lm.cfg.max_delay + self.lm.lines.lead

    def step(self, user: torch.Tensor | None, *, model: torch.Tensor | None = None,
             text: torch.Tensor | None = None, embedding: torch.Tensor | None = None,
             mark: Callable[[str], None] = _no_mark) -> torch.Tensor | None:
        """user [user_q] codes (int64, on the LM's device), or None for PersonaPlex to predict
        the user's codebooks too; `model` [model_q] and `text` [1] force those streams
        (prompts); `embedding` [1, 1, dim] replaces the summed input embeddings (a replayed
        voice prompt). Returns tokens [dep_q + 1] (text, then the depformer's codebooks), or
        None during start-up exactly when the reference does."""
        cfg = self.lm.cfg
        if user is None and not cfg.is_personaplex:
            raise ValueError("Moshi needs the user's codes every frame")
        if self.lm.lines.lead and self.frames == 0:
            # PersonaPlex's first step only primes its cache: this frame's tokens are dropped.
            # A replayed embedding is not consumed: the reference retries it on the next step.
            self.frames = 1
            if embedding is None:
                return None
        self.store.advance("frame")
        frame = self.backbone(user, model=model, text=text, embedding=embedding)
        mark("backbone")
        out = self.depformer(*frame)
        mark("depformer")
        self.frames += 1
        return out if self.started else None

    def backbone(self, user: torch.Tensor | None, model: torch.Tensor | None = None,
                 text: torch.Tensor | None = None, embedding: torch.Tensor | None = None) -> tuple:
        """Device work up to the text token: a pure function of device tensors and the store,
        so it can be captured as a CUDA graph. Returns what `depformer` takes."""
        lm, store, cfg, lines = self.lm, self.store, self.lm.cfg, self.lm.lines
        if user is not None:
            lines.force(store, 1 + cfg.model_q, user)
        if model is not None:
            lines.force(store, 1, model)
        if text is not None:
            lines.force(store, 0, text)
        inp, target, forced = lines.begin_frame(store)
        x = lm.embed_streams(inp) if embedding is None else embedding
        if self.inputs is not None:
            self.inputs.append(x)
        h, text_logits = lm.backbone(x, store)
        text_token = sample(text_logits, self.text, self.generator)
        return h, text_token, target, forced

    def depformer(self, h: torch.Tensor, text_token: torch.Tensor, target: torch.Tensor,
                  forced: torch.Tensor) -> torch.Tensor:
        """Device work from the text token to the frame's output tokens (capturable too)."""
        lm, store, cfg = self.lm, self.store, self.lm.cfg
        prev = torch.where(forced[:1], target[:1], text_token)
        lm.restart_depformer(store)
        generated = [text_token]
        for k in range(cfg.dep_q):
            token = sample(lm.depformer_step(k, prev, h, store), self.audio, self.generator)
            generated.append(token)
            prev = torch.where(forced[k + 1:k + 2], target[k + 1:k + 2], token)
        return lm.lines.commit(store, torch.cat(generated))
