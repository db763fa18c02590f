"""How soon the model answers: from the end of the person's speech to the model's first sound at
the speaker, per reply, from each period's levels (the echo-cancelled microphone's, the model's as
written to the speaker, and how much waits before it there). A reply counts when the model was
quiet as the person stopped; speech that overlaps (full duplex, or talking over) is no reply."""
from __future__ import annotations

import math
import statistics

from engine import FRAME_SECONDS

from ..conversation.barge_in import MODEL_DBFS, SPEECH_DBFS

PAUSE_S = 0.32
"""This long below the speech level ends the person's turn (a breath inside a sentence is shorter)."""


class ReplyTime:
    """`step_s`: the audio a model's step hears. A model that steps once a second decides at the end of each
    of the conversation's seconds, so part of each reply is the wait for that boundary (`waits`), told apart
    from the rest: the step's work and the audio's way to the speaker."""

    def __init__(self, step_s: float = FRAME_SECONDS):
        self.step_s = step_s
        self.replies: list[float] = []
        self.waits: list[float] = []  # each reply's wait for the model's next step
        self._last_loud: int | None = None   # the person's last loud period
        self._ended_at: float | None = None  # when the person's last turn ended, waiting for a reply
        self._model_quiet = True

    def add(self, index: int, microphone_dbfs: float, speaker_dbfs: float, speaker_backlog_s: float) -> None:
        """Period `index`: its microphone level, the model's frame written in it, and the seconds
        of the model's audio queued for the speaker after it (the frame plays at their start)."""
        model_loud = speaker_dbfs >= MODEL_DBFS
        if self._ended_at is not None and model_loud:
            plays_at = (index + 1) * FRAME_SECONDS + max(0.0, speaker_backlog_s - FRAME_SECONDS)
            self.replies.append(max(0.0, plays_at - self._ended_at))
            self.waits.append(math.ceil(round(self._ended_at / self.step_s, 6)) * self.step_s - self._ended_at)
            self._ended_at = None
        if microphone_dbfs >= SPEECH_DBFS:
            self._last_loud, self._ended_at = index, None
            self._model_quiet = not model_loud
        elif self._last_loud is not None and (index - self._last_loud) * FRAME_SECONDS >= PAUSE_S:
            if self._model_quiet and not model_loud:
                self._ended_at = (self._last_loud + 1) * FRAME_SECONDS
            self._last_loud = None
        if model_loud:
            self._model_quiet = False

    def line(self) -> str:
        if not self.replies:
            return "Reply time: — (how soon the model answers once you stop speaking)"
        waited = ""
        if self.step_s > FRAME_SECONDS:  # a once-a-second model: how much of it was its rhythm
            waited = f" ({self.waits[-1]:.2f} s of it until the model's next {self.step_s:g} s step)"
        return (f"Reply time: {self.replies[-1]:.2f} s after you stopped speaking{waited} · median "
                f"{statistics.median(self.replies):.2f} s over {len(self.replies)} "
                f"repl{'y' if len(self.replies) == 1 else 'ies'}")
