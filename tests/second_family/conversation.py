"""The second family's conversation: a one-second step of three stages over the generic runner.

    hear    a second of 16 kHz PCM -> one summary, written to its own clock's ring
    decide  the summaries so far -> (speak or listen, a word)        (every step)
    speak   the last two summaries -> 1.5 s of 24 kHz speech         (speaking steps only)

Each stage is a function of fixed device buffers and the store, so the runner replays it;
none reads another's outputs, so each replays on its own. The decision is read on the host
(a speaking step then runs `speak`), as a once-a-second model reads its listen/speak decision.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
import torch

from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.runtime.stages import Regeneration, Stage, StageRunner
from engine.state.placement import new_store, placement_for

STAGES = ("hear", "decide", "speak")


@dataclasses.dataclass(frozen=True)
class SecondReport:
    """What a step did, in the family's own words."""
    speaking: bool
    step: int

    def figures(self) -> dict[str, str]:
        return {"decision": "speak" if self.speaking else "listen", "step": str(self.step)}


class SecondConversation:
    """engine.families.protocol.FamilyConversation for the second family."""

    stages = STAGES
    stage_words = {"hear": "hearing the second", "decide": "deciding", "speak": "saying it"}
    output_width = 2
    """The decision (1: speak) and a word's index."""
    predictor = None
    prompt_s = 0.0
    persona = Persona()
    voices: list[str] = []
    default_role = ""

    def __init__(self, model, generator: torch.Generator, options: RuntimeOptions, persona, predictor):
        self.model, self.config = model, model.config
        self.set_persona(persona)
        if predictor is not None:
            raise ValueError(f"{model.name} has no predicting policy")
        device = model.device
        self.runner = StageRunner(new_store(model.regions(), device, options), device, generator, options)
        self._pcm = torch.zeros(model.step_samples, device=device)  # graphs read their input here
        self.steps = 0
        self.interruptions = 0
        self._interrupted = False

    # --- what a person sets, and what it can run ------------------------------------------

    def capabilities(self) -> dict[str, str | None]:
        return {"policy.ar": None}

    def refusal(self, options: RuntimeOptions) -> str | None:
        return None if options.policy == "ar" else f"policy {options.policy!r} is not available: {self.model.name} " \
                                                    "has one policy"

    def load_predictor(self, path) -> None:
        if path is not None:
            raise ValueError(f"{self.model.name} has no predicting policy")

    def set_persona(self, persona) -> None:
        self.check_persona(persona)

    def check_persona(self, persona: Persona | None) -> None:
        if persona is not None and (persona.voice or persona.role.strip()):
            raise ValueError(f"{self.model.name} takes no voice or role prompt")

    # --- options and state -----------------------------------------------------------------

    def configure(self, options: RuntimeOptions) -> None:
        self.runner.configure(options)

    def change(self, old: RuntimeOptions, new: RuntimeOptions) -> Regeneration | None:
        runner, device = self.runner, self.model.device
        store = None
        if placement_for(device, new) is not type(runner.store):
            store = new_store(self.model.regions(), device, new)
        replay = new.graph_replay and runner.can_replay
        if replay and (store is not None or (not old.graph_replay and runner.stale())):
            return runner.regenerate(store=store)
        if store is not None:
            runner.move_state(store)
        return None

    def reset(self, options: RuntimeOptions, cancelled: Callable[[], bool], progress) -> tuple[RuntimeOptions, bool]:
        self.runner.reset()
        self.steps = 0
        return options, True

    def prepare(self, pcm: torch.Tensor, options: RuntimeOptions) -> None:
        self._pcm.copy_(pcm)
        self.runner.prepare(self._stages())
        self.runner.reset()

    # --- a step ----------------------------------------------------------------------------

    def _stages(self) -> list[Stage]:
        return [Stage("hear", self._hear, (("second", 1),)), Stage("decide", self._decide), Stage("speak", self._speak)]

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark: Callable[[str | None], None]):
        hear, decide, speak = self._stages()
        self._pcm.copy_(pcm, non_blocking=True)
        self.runner.run(hear)
        mark("hear")
        tokens = self.runner.run(decide)
        mark("decide")
        self.steps += 1
        speaking = bool(tokens[0])  # read on the host, as a once-a-second model reads its decision
        if self._interrupted:  # a person spoke over it: this step listens, as MiniCPM-o's break does
            speaking, self._interrupted = False, False
        out = None
        if speaking:
            out = self.runner.run(speak)
            mark("speak")
        time.sleep(self.config.get("step_delay_s", 0))  # a big model's second of work, where a test asks for it
        return tokens, out, SecondReport(speaking, self.steps)

    interruptible = True

    def interrupt(self) -> None:
        self.interruptions += 1
        self._interrupted = True

    def spare(self, until: float) -> None:
        """Nothing to do between steps: every shape is captured when the conversation starts."""

    def tally(self) -> SecondTally:
        return SecondTally()

    def text(self, tokens: np.ndarray) -> str:
        return f" {self.config['words'][int(tokens[1])]}" if tokens[0] else ""  # a new word: a space first

    # --- the stages' work: fixed buffers and the store only ----------------------------------

    def _hear(self) -> None:
        store, w = self.runner.store, self.model.tensors
        summary = torch.tanh(self._pcm.view(-1, self.config["window"]) @ w["hear"].T).mean(0)
        count = store["second.count"]
        store["second.heard"].index_copy_(0, count % self.config["context_steps"], summary[None])
        store["second.sum"].add_(summary)
        count.add_(1)

    def _recent(self, back: int) -> torch.Tensor:
        store = self.runner.store
        at = (store["second.count"] - 1 - back).clamp(min=0) % self.config["context_steps"]
        return store["second.heard"].index_select(0, at)[0]

    def _decide(self) -> torch.Tensor:
        count = self.runner.store["second.count"]
        speak = (count % self.config["speak_every"] == 0).to(torch.int64)  # every third step speaks
        word = (self.model.tensors["text"] @ self._recent(0)).argmax().view(1)
        return torch.cat([speak, word])

    def _speak(self) -> torch.Tensor:
        w = self.model.tensors
        recent = self._recent(0) + self._recent(1)
        recent = recent / (recent.norm() + 1e-6)
        return (0.3 * torch.tanh((w["times"] * recent) @ w["speak"].T)).reshape(-1)


@dataclasses.dataclass
class SecondTally:
    """Its steps summed up: how many it heard and how many it spoke."""
    steps: int = 0
    spoken: int = 0

    def add(self, report: SecondReport | None, timings: dict[str, float]) -> None:
        if report is not None:
            self.steps += 1
            self.spoken += report.speaking

    def summary(self) -> str:
        return f"second family: spoke {self.spoken} of {self.steps} steps" if self.steps else ""

    def lines(self, options) -> list[tuple[str, str]]:
        if not self.steps:
            return []
        return [(f"Spoke in {self.spoken} of {self.steps} seconds", "Its decision, once a second: speak or listen.")]
