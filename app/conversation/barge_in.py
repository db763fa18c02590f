"""Barge-in: the person talks over the model, and the model stops. Decided on the engine thread
from each period's echo-cancelled microphone level against what the speaker played as it was captured:
speech above a level for long enough (a cough or a door is shorter) interrupts the model. The
echo canceller leaves the model's own voice far below the level, so it does not interrupt itself."""
from __future__ import annotations

import dataclasses

from engine import FRAME_SECONDS

SPEECH_DBFS = -40.0
"""A period of the (echo-cancelled) microphone this loud or louder is the person speaking: normal
speech at a desk microphone is -35 to -20 dBFS; the model's echo after cancellation is under -55."""
MODEL_DBFS = -50.0
"""The model is speaking while what the speaker played in the period is this loud or louder (its pauses are not)."""
HOLD_S = 0.2
"""Speech over the model this long interrupts it."""


@dataclasses.dataclass
class BargeIn:
    speech_dbfs: float = SPEECH_DBFS
    model_dbfs: float = MODEL_DBFS
    hold_periods: int = -(-round(HOLD_S * 1000) // round(FRAME_SECONDS * 1000))  # 200 ms: 3 periods of 80 ms
    _run: int = 0

    def hears(self, microphone_dbfs: float, speaker_dbfs: float) -> bool:
        """One period: whether the person has now spoken over the model for `hold_periods` in a
        row (then the count starts again). Any period the model is quiet or the person is
        quiet starts it again."""
        if speaker_dbfs < self.model_dbfs or microphone_dbfs < self.speech_dbfs:
            self._run = 0
            return False
        self._run += 1
        if self._run < self.hold_periods:
            return False
        self._run = 0
        return True
