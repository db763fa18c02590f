"""The recording's model channel: what the speaker played, lined up with the microphone's frames.

The recording follows the microphone's frames as the engine took them (its user channel). Each
frame's capture time (the microphone stream's first sample's PortAudio time, plus the samples
since, lost ones included) picks what the speaker was playing at that moment (its stream's
first sample's time, plus the samples since), so the two channels sound as they did in the
room: the reply after the speaker's latency, late audio late, a skipped frame missing.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import soxr

from engine import FRAME_SIZE
from engine import SAMPLE_RATE as ENGINE_RATE

from .speaker_queue import PLAYED_LOG_S, SpeakerQueue

MAX_WAITING = 50  # frames: a speaker that stopped playing does not hold the recording up for ever


class MicPositions:
    """Where the waiting microphone samples lie in the microphone's stream, at the engine's
    rate, while some are dropped (the latency bound) and some lost on the way (a full ring)."""

    def __init__(self):
        self.front = 0.0  # the first waiting sample's position
        self._gaps: list[list[float]] = []  # [waiting samples before it, samples lost]

    def lost(self, waiting: int, samples: float) -> None:
        """`samples` were lost after the first `waiting` of those waiting now."""
        self._gaps.append([waiting, samples])

    def take(self, n: int) -> float:
        """The first `n` waiting samples leave (a frame, or dropped); returns where they began."""
        self._pass_gaps()
        start = self.front
        self.front += n
        for gap in self._gaps:
            gap[0] -= n
        self._pass_gaps()
        return start

    def _pass_gaps(self) -> None:
        while self._gaps and self._gaps[0][0] <= 0:
            self.front += self._gaps.pop(0)[1]


class PlayedTrack:
    """Engine thread: the speaker queue's pre-volume log, resampled to the engine's rate, cut
    into one frame per microphone frame (`want` its capture time, then `frames`)."""

    def __init__(self, queue: SpeakerQueue):
        self._queue = queue
        self._scratch = np.zeros(queue.played.capacity, dtype=np.float32)
        self._resampler = self._new_resampler()
        self._buf = np.zeros(0, dtype=np.float32)
        self._start = 0   # played position (engine rate) of _buf[0]
        self._fed = 0     # the played stream's samples accounted for (at the speaker's rate), lost included
        self._lost_seen = 0
        self._wanted: deque[float] = deque()  # capture times of the frames not given yet

    def want(self, capture_time: float) -> None:
        self._wanted.append(capture_time)

    def frames(self, final: bool = False) -> list[np.ndarray]:
        """The played audio of the frames wanted so far, in order, those the speaker has played
        all of; with `final` (the streams have stopped), all of them: silence where nothing
        played."""
        self._pull(final)
        given, end, t0 = [], self._start + len(self._buf), self._queue.t0
        while self._wanted:
            start = None if t0 is None else round((self._wanted[0] - t0) * ENGINE_RATE)
            waiting = not final and len(self._wanted) <= MAX_WAITING
            if waiting and (start is None or start + FRAME_SIZE > end):
                break
            frame = np.zeros(FRAME_SIZE, dtype=np.float32)
            if start is not None:
                lo, hi = max(start, self._start), min(start + FRAME_SIZE, end)
                if hi > lo:
                    frame[lo - start:hi - start] = self._buf[lo - self._start:hi - self._start]
                self._forget(start + FRAME_SIZE)
            given.append(frame)
            self._wanted.popleft()
        self._forget(end - int(PLAYED_LOG_S * ENGINE_RATE))  # nothing asked for it for that long
        return given

    def _pull(self, final: bool) -> None:
        queue = self._queue
        n = queue.played.read_into(self._scratch)
        lost = queue.played_lost - self._lost_seen  # read after: lost after what was just read
        self._lost_seen += lost
        parts = [self._buf, self._resampler.resample_chunk(self._scratch[:n])] if n else [self._buf]
        self._fed += n
        if lost or final:  # the stream breaks: what the resampler holds back comes out now
            parts.append(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
            self._resampler = self._new_resampler()
            self._fed += lost
        self._buf = np.concatenate(parts)
        if lost:  # nothing known of it: silence in the recording
            resumes = round(self._fed * ENGINE_RATE / queue.rate)
            self._buf = np.concatenate([self._buf, np.zeros(max(0, resumes - self._start - len(self._buf)),
                                                            np.float32)])

    def _forget(self, before: int) -> None:
        before = min(before, self._start + len(self._buf))  # positions stay those of the stream
        if before > self._start:
            self._buf = self._buf[before - self._start:]
            self._start = before

    def _new_resampler(self):
        return soxr.ResampleStream(self._queue.rate, ENGINE_RATE, 1, dtype="float32")
