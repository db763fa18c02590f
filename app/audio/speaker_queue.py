"""The model's audio on its way to the speaker, and what the speaker played.

After a stall the engine catches up faster than real time; its audio then waits in the queue
and plays late, up to `max_backlog_s` beyond the prebuffer. A frame that would wait longer is
skipped whole (a cut inside a frame would click, and whole frames are what the recording can
mark). The latency comes back in the model's pauses: while more than the prebuffer and a frame
waits, a silent frame is left out (no speech is lost, and the reply is late only until the
model next pauses). The callback keeps what it handed the device twice: after the volume (the echo
canceller's far end: exactly what was played) and before it (the recording's model channel,
app/audio/played_track.py: the model's speech where and when it was played, at the model's level).
"""
from __future__ import annotations

import numpy as np

from engine import FRAME_SECONDS

from .ring_buffer import SpscRing

STALL_HALF_LIFE_S = 60.0
"""The longest recent stall, as the queue reckons it, halves in this long unless a stall as long comes again."""
PLAYED_LOG_S = 8.0  # what the speaker played waits this long for the engine thread (a stall)
QUIET_MEAN_SQUARE = 1e-5  # a frame below -50 dBFS is a pause: left out while the speaker is late
CUT_FADE_S = 0.005  # an interrupted model's speech fades out over this long: a cut to silence would click


class SpeakerQueue:
    """Written by the engine thread (`put`), played by PortAudio's callback (`fill`)."""

    def __init__(self, rate: int, prebuffer_s: float, max_backlog_s: float, stall_s: float = 0.0):
        """`stall_s`: how long one step of the model may hold the engine thread (a once-a-second
        model's second). The longest stall seen lately (`note_gap`, at most `stall_s`) may
        wait beyond the prebuffer without a pause being left out, or the next step's stall would
        empty the queue in the middle of the model's speech; more than that waiting is latency,
        which a reply would wait behind, so pauses are left out down to it."""
        self.rate = rate
        frame = int(np.ceil(rate * FRAME_SECONDS))
        self.limit = int(rate * (prebuffer_s + max_backlog_s))  # queued beyond this: skip the frame
        self._least = int(rate * prebuffer_s) + frame  # the queue's most when the engine keeps up, less a stall
        self.stall_s = stall_s  # the longest a step may stall
        self.recent_stall_s = 0.0  # the longest stall lately, decaying
        self._decay = 0.5 ** (FRAME_SECONDS / STALL_HALF_LIFE_S)  # a frame's decay of it
        self.ring = SpscRing(self.limit + 2 * frame)  # a frame more, and soxr's uneven blocks
        self.prebuffer = int(rate * prebuffer_s)
        self.far = SpscRing(int(rate * PLAYED_LOG_S))     # after the volume: the echo canceller's
        self.played = SpscRing(int(rate * PLAYED_LOG_S))  # before it: the recording's
        self.played_lost = 0   # samples `played` refused (the engine thread did not come for them)
        self.gain = 1.0        # the volume, applied as samples are handed to the device
        self.t0: float | None = None  # PortAudio time the stream's first sample was played at
        self.underflows = 0  # the speaker ran dry in the model's speech
        self._sounding = False  # what it last played was speech, not a pause
        self.dropped = 0       # samples skipped (at `rate`)
        self._priming = True
        self.played_total = 0  # samples handed to the device so far (silence too)
        self.cut_at: int | None = None  # played_total where the last cut began (its fade's first sample)
        self.cut_asked_at: int | None = None  # played_total when the last cut was asked for
        self.cut_dropped = 0   # samples of queued speech the cuts dropped
        # The queue's own count of its samples (at `rate`), for telling which were heard: those that
        # went in, those the device played (a cut's fade included), and the last cut's dropped span
        # [from, to) in the same count (what had gone in before it, not played).
        self.entered = 0
        self.heard = 0
        self.last_cut = (0, 0)
        self._ramp = np.linspace(1.0, 0.0, max(1, round(rate * CUT_FADE_S)), endpoint=False, dtype=np.float32)
        self._cuts_asked = self._cuts_done = 0
        self._fade = -1  # samples of the fade done, while fading; -1 when not

    # --- PortAudio's real-time thread: no allocation, no lock ------------------------
    def fill(self, out: np.ndarray, dac_time: float) -> None:
        if self.t0 is None:
            self.t0 = dac_time
        if self._cuts_asked != self._cuts_done:
            self._cuts_done = self._cuts_asked
            if self._fade < 0:
                self._fade, self.cut_at = 0, self.played_total
        if self._fade >= 0:
            self._fade_out(out)
        elif self._priming and self.ring.available() < self.prebuffer:
            out.fill(0)
        else:
            self._priming = False
            n = self.ring.read_into(out)
            self.heard += n
            if n:
                self._sounding = float(np.dot(out[:n], out[:n])) > QUIET_MEAN_SQUARE * n
            if n < len(out):
                out[n:] = 0
                # A gap in speech is heard; running dry in a pause is not (a once-a-second model's
                # step, which holds the engine longer than the queued silence lasts, starts a reply).
                self.underflows += self._sounding
                self._priming = True
        self.played_total += len(out)
        # Silence too: both logs follow the device's timeline.
        taken = self.played.write(out)
        if taken < len(out):
            self.played_lost += len(out) - taken
        if self.gain != 1.0:
            out *= self.gain
        self.far.write(out)

    def _fade_out(self, out: np.ndarray) -> None:
        """A cut in progress: what is queued plays on under the falling ramp, then the rest of
        the queue is dropped and the speaker waits for a prebuffer of new speech."""
        k = min(len(out), len(self._ramp) - self._fade)
        n = self.ring.read_into(out[:k])
        self.heard += n
        out[n:] = 0
        out[:k] *= self._ramp[self._fade:self._fade + k]
        self._fade += k
        if self._fade == len(self._ramp):
            start = self.heard + self.cut_dropped
            skipped = self.ring.skip()
            self.last_cut = (start, start + skipped)  # before the count: `positions` reads them the other way
            self.cut_dropped += skipped
            self._fade, self._priming = -1, True

    # --- the engine thread ------------------------------------------------------------
    def cut(self) -> None:
        """Stop the model's queued speech (the user spoke over it): it fades out over
        CUT_FADE_S from the next sample the device takes, and what is queued after that is
        dropped. Speech put afterwards plays as usual."""
        self.cut_asked_at = self.played_total
        self._cuts_asked += 1

    @property
    def target(self) -> int:
        """The most samples that may wait when the engine keeps up: the prebuffer, a frame and the
        longest stall lately."""
        return self._least + int(self.rate * self.recent_stall_s)

    def note_gap(self, seconds: float, in_speech: bool = True) -> None:
        """A frame is written `seconds` after the one before: what it took beyond a frame was a stall
        (a step's work), as long as the next may be. Only a stall that began in the model's speech
        (`in_speech`: the frame before sounded) counts: one in a pause (a reply's first step, work
        done between turns) empties a queue of silence, which is not heard. The reckoning decays a
        frame's worth; a stall no longer than `stall_s` counts."""
        stall = min(self.stall_s, max(0.0, seconds - FRAME_SECONDS)) if in_speech else 0.0
        self.recent_stall_s = max(stall, self.recent_stall_s * self._decay)

    def late(self) -> bool:
        """More waits than when the engine keeps up: a pause can be left out."""
        return self.ring.available() > self.target

    def full(self) -> bool:
        """The speaker is more than the prebuffer and the allowed backlog behind: the next frame
        is skipped (decided before it is resampled, so the cut falls between whole frames)."""
        return self.ring.available() > self.limit

    def put(self, samples: np.ndarray) -> None:
        written = self.ring.write(samples)
        self.entered += written
        self.dropped += len(samples) - written  # none, unless `full` was not asked

    def positions(self) -> tuple[int, int, tuple[int, int]]:
        """(samples gone in, samples gone out: played or dropped by a cut, the last cut's dropped
        span), in the queue's own count: a sample at position p was heard once p < gone out and p is
        not in a cut's span."""
        gone = self.heard + self.cut_dropped
        return self.entered, gone, self.last_cut

    def backlog_s(self) -> float:
        """How long the audio queued now will take to play."""
        return self.ring.available() / self.rate
