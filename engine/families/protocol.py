"""What the runtime asks of a model family: the one list of the members it uses of a loaded
model (`DuplexModel`) and of a conversation (`FamilyConversation`). The session, `offline`, the
bench's generic parts and the app hold them as these types and use nothing else of them; each
family's package provides classes with all of it (and registers them: engine.families)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ..options import RuntimeOptions
from ..runtime.stages import Regeneration, StageRunner

Mark = Callable[[str | None], None]
"""Told each stage's name as its work is queued (engine.runtime.timing.FrameTimer.mark)."""


class Tally(Protocol):
    """A family's step reports summed up over a conversation (or any stretch of one)."""

    def add(self, report: object | None, timings: dict[str, float]) -> None:
        """One period's report (FrameOutput.report; None: nothing to count) and stage timings."""

    def summary(self) -> str:
        """A line for the end of a run ("" when there is nothing to say)."""

    def lines(self, options: RuntimeOptions) -> list[tuple[str, str]]:
        """What the window's Engine details show of it so far, under `options`: (a line in a
        person's words, its tooltip naming the terms) each; [] for nothing."""


class DuplexModel(Protocol):
    """A loaded model of any family."""

    name: str
    """A repository name, a folder's name, or the name its config.json gives."""
    path: Path
    """The folder its files were read from."""
    notice: str
    """What the person should know about the load ("" for nothing)."""

    @property
    def family(self) -> str:
        """The name its family registered (engine.families)."""

    @property
    def device(self) -> torch.device: ...

    @property
    def weights(self) -> str:
        """Its weights as they are in memory: "int4", "int8", or a float dtype ("bf16", "fp32")."""

    @property
    def weights_option(self) -> str:
        """What RuntimeOptions.weights calls them: "int4", "int8" or "bf16"."""

    @property
    def input_rate(self) -> int:
        """Samples a second of the audio it hears."""

    @property
    def output_rate(self) -> int:
        """Samples a second of the audio it speaks."""

    @property
    def step_samples(self) -> int:
        """Samples of its input one step hears (its step: 80 ms, one second, ...)."""

    @property
    def predictor_file(self) -> Path | None:
        """A predictor for its predicting policies shipped beside its weights, if any."""


class FamilyConversation(Protocol):
    """A conversation of one family, built by the session with (model, generator, options,
    settings, predictor) and used by it alone."""

    stages: tuple[str, ...]
    """The stages of a step, in the order they run: what the timer, the panel and the bench
    report the time of."""
    stage_words: dict[str, str]
    """Each stage in a person's words, for the window (a stage without is shown by its name)."""
    output_width: int
    """Tokens a step outputs."""
    runner: StageRunner
    """The stage runner: its graphs, and the state it holds (placed by the conversation)."""
    prompt_s: float
    """Seconds the last reset spent on the family's prompts (0 without any)."""
    predictor: object | None
    """The predictor of a policy that predicts ahead (None: none loaded)."""
    interruptible: bool
    """Whether a person talking over the model should cut its speech short (`interrupt`): a
    once-a-second model's, which would otherwise speak on; not one that hears every frame."""

    def interrupt(self) -> None:
        """The person talked over the model: its turn ends at its next step (only where
        `interruptible`)."""

    def spare(self, until: float) -> None:
        """After a step, before the next: work that later steps would otherwise stall on, ending
        before `until` (a perf_counter time), leaving the conversation's output as it would be."""

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
        """One step: pcm [step_samples] at the input rate, in a host buffer -> (its output
        tokens [output_width] or None while it has none; its speech on the device at the output
        rate, any length, or None for none; its report or None). Marks each stage as queued."""

    def tally(self) -> Tally:
        """A new tally of this conversation's step reports."""

    def text(self, tokens: np.ndarray) -> str:
        """The text a step's output tokens carry ("" for none)."""
