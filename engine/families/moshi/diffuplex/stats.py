"""What DiffuPlex did, frame by frame and summed up: plain data (no torch), shared by the
session, `offline`'s summary and the app's panel."""
from __future__ import annotations

import dataclasses

from ....period import FRAME_RATE

REFUSALS = {
    "below_tau": "the prediction's confidence was below τ",
    "user_missed": "the user did not say what was predicted",
    "speech": "LISTEN saw the model speak",
}
"""Why a planned frame was not played -> the words for it (the checks' `refused`)."""
SHOWN_REFUSALS = {"below_tau": "the guess was less sure than needed",
                  "user_missed": "you did not say what was guessed",
                  "speech": "the model was about to speak while guessing only while listening"}
"""The same, in the window's plain words (its tooltips name the terms)."""
GUESSING_TIP = ("DiffuPlex lets one run of the large model guess several steps ahead; the guessed steps it plays "
                "need no run of their own. A plan dropped: a run that threw its guesses away.\n"
                "run of the large model: wake; plan dropped: revision")
REFUSAL_TIP = ("Why guessed steps were not played, counted per run of the large model: their confidence was below "
               "what is needed, you did not say what was guessed, or, guessing only while listening, the model was "
               "about to speak.\nconfidence needed: τ; checking guesses: verification; guess while listening: LISTEN")


@dataclasses.dataclass(frozen=True)
class WakeReport:
    """What DiffuPlex did in one frame."""
    woke: bool
    """The backbone ran this frame (False: a predicted frame was played)."""
    discarded: int
    """Planned frames thrown away by this frame's wake (a revision when > 0)."""
    refused: str | None = None
    """Why this wake's plan stopped early (a REFUSALS name); None when the plan was
    used up or there was none."""
    confidence: float | None = None
    """The confidence of the planned frame checked this frame; None when none was."""


@dataclasses.dataclass
class DiffuPlexStats:
    frames: int = 0
    wakes: int = 0
    revisions: int = 0
    backbone_s: float = 0.0
    """Backbone and depformer time, over every frame."""
    refusals: dict[str, int] = dataclasses.field(default_factory=dict)
    """Wakes whose plan stopped early, by why (REFUSALS)."""
    checked: int = 0
    """Planned frames checked (played or refused)."""
    confidence_sum: float = 0.0

    def add(self, report: WakeReport | None, timings: dict[str, float]) -> None:
        if report is None:
            return
        self.frames += 1
        self.wakes += report.woke
        self.revisions += report.discarded > 0
        self.backbone_s += timings.get("backbone", 0.0) + timings.get("depformer", 0.0)
        if report.refused is not None:
            self.refusals[report.refused] = self.refusals.get(report.refused, 0) + 1
        if report.confidence is not None:
            self.checked += 1
            self.confidence_sum += report.confidence

    @property
    def played_per_wake(self) -> float:
        """Predicted frames played after each wake, with no backbone run of their own."""
        return (self.frames - self.wakes) / max(self.wakes, 1)

    @property
    def mean_confidence(self) -> float | None:
        """Of the planned frames checked; None before any was."""
        return self.confidence_sum / self.checked if self.checked else None

    @property
    def wakes_per_second(self) -> float:
        return self.wakes * FRAME_RATE / max(self.frames, 1)

    @property
    def frames_per_wake(self) -> float:
        """Frames each wake covered: its own, and the predicted ones played after it."""
        return self.frames / max(self.wakes, 1)

    @property
    def backbone_ms_per_frame(self) -> float:
        return 1000 * self.backbone_s / max(self.frames, 1)

    def refusal_lines(self) -> list[str]:
        """Why planned frames were not played, most frequent first, in words."""
        return [f"{count} × {REFUSALS.get(why, why)}"
                for why, count in sorted(self.refusals.items(), key=lambda item: -item[1])]

    def lines(self, options) -> list[tuple[str, str]]:
        """What the window shows of it (engine.families.protocol.Tally.lines)."""
        if not self.frames:
            return [("Guessing ahead (DiffuPlex): off, the large model runs every step", GUESSING_TIP)]
        shown = [(f"Guessing ahead (DiffuPlex): {self.played_per_wake:.2f} guessed steps played per run of the "
                  f"large model · {self.wakes_per_second:.2f} runs a second · {self.revisions} plans dropped",
                  GUESSING_TIP)]
        refused = [f"{count} × {SHOWN_REFUSALS.get(why, why)}"
                   for why, count in sorted(self.refusals.items(), key=lambda item: -item[1])]
        if refused:
            confidence = "" if self.mean_confidence is None else \
                f" (the guesses' mean confidence {self.mean_confidence:.2f}; {options.tau:.2f} is needed)"
            shown.append(("Guesses not played: " + "; ".join(refused) + confidence, REFUSAL_TIP))
        return shown

    def summary(self) -> str:
        """A line of what DiffuPlex did ("" when it played no frame)."""
        if not self.frames:
            return ""
        line = (f"DiffuPlex: {self.played_per_wake:.2f} predicted frames played per wake "
                f"({self.wakes_per_second:.2f} wakes/s, {self.frames_per_wake:.2f} frames per wake), "
                f"{self.revisions} revisions, backbone {self.backbone_ms_per_frame:.1f} ms per frame")
        if self.mean_confidence is not None:
            line += f"; predictions' mean confidence {self.mean_confidence:.2f}"
        if self.refusals:
            line += "; not played: " + ", ".join(self.refusal_lines())
        return line
