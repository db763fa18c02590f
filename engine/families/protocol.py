"""What the session asks of a model family's conversation: the one list of its members
(`FamilyConversation`). engine.session holds its conversation as this type and uses nothing
else of it; each family's package provides a conversation class with all of it."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from ..options import RuntimeOptions
from ..runtime.stages import Regeneration, StageRunner

Mark = Callable[[str | None], None]
"""Told each stage's name as its work is queued (engine.runtime.timing.FrameTimer.mark)."""


class FamilyConversation(Protocol):
    """A conversation of one family, built by the session with (model, generator, options,
    settings, predictor) and used by it alone."""

    stages: tuple[str, ...]
    """The stages of a step, in the order they run: what the timer, the panel and the bench
    report the time of."""
    output_width: int
    """Tokens a step outputs."""
    runner: StageRunner
    """The stage runner: its graphs, and the state it holds (placed by the conversation)."""
    prompt_s: float
    """Seconds the last reset spent on the family's prompts (0 without any)."""
    predictor: object | None
    """The predictor of a policy that predicts ahead (None: none loaded)."""

    def capabilities(self) -> dict[str, str | None]:
        """Each policy the family has, as "policy.NAME": None if it can run here, else why not."""

    def refusal(self, options: RuntimeOptions) -> str | None:
        """Why `options` cannot run on this conversation (its policy), or None."""

    def load_predictor(self, path: str | Path | None) -> None:
        """A predictor file for the predicting policies, or None to unload it (used from the
        next reset)."""

    @property
    def persona(self) -> object:
        """What the person set for this conversation (the family's own type)."""

    @property
    def voices(self) -> list[str]:
        """Voice names a person can choose; empty for a family without voices."""

    @property
    def default_role(self) -> str:
        """The role prompt used when none is given ("" for a family without one)."""

    def set_persona(self, persona: object | None) -> None:
        """Check what the person set and prepare it (a bad voice fails here)."""

    def check_persona(self, persona: object) -> None:
        """ValueError in one line unless the family takes `persona`; nothing is run."""

    def configure(self, options: RuntimeOptions) -> None:
        """Run the next steps under `options`."""

    def change(self, old: RuntimeOptions, new: RuntimeOptions) -> Regeneration | None:
        """Options go from `old` to `new`: the graphs `new` needs before it takes effect
        (recorded in the background), or None once it can take effect now. The conversation
        alone places its state: a change of placement moves it here, or when the graphs are
        done."""

    def reset(self, options: RuntimeOptions, cancelled: Callable[[], bool],
              progress: Callable[[int, int], None] | None) -> tuple[RuntimeOptions, bool]:
        """A new conversation under `options`: returns the options in force and False if
        `cancelled()` stopped its prompts."""

    def prepare(self, pcm: torch.Tensor, options: RuntimeOptions) -> None:
        """Compile and capture what the first steps would stall on; the state goes back to zero."""

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark: Mark
             ) -> tuple[torch.Tensor | None, torch.Tensor | None, object | None]:
        """One step: (output tokens, PCM on the device; None, None while it has none yet; the
        step's report or None)."""

    def text_piece(self, token: int) -> str:
        """The text a text token stands for."""
