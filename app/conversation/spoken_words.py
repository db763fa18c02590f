"""Which of the model's words the person has heard: a frame's text waits until the speaker starts
playing its speech, and is never shown if a cut (talking over the model) dropped it first, or if
the speaker was too far behind and skipped the frame. Positions are the speaker queue's own count
of its samples (app/audio/speaker_queue.py `positions`)."""
from __future__ import annotations

from collections import deque


class SpokenWords:
    def __init__(self):
        self._waiting: deque[tuple[int, int, str]] = deque()  # (frame, its first sample's position, text)

    def add(self, index: int, start: int, text: str) -> None:
        """Frame `index`'s text, its speech queued from position `start` on."""
        if text:
            self._waiting.append((index, start, text))

    def heard(self, gone: int, cut: tuple[int, int]) -> list[tuple[int, str]]:
        """The waiting texts whose speech has begun to play, in order ((frame, text)); those whose
        first sample a cut dropped ([from, to) of `cut`) are forgotten. `gone`: the samples that
        have left the queue, played or dropped."""
        out = []
        while self._waiting and self._waiting[0][1] < gone:
            index, start, text = self._waiting.popleft()
            if not cut[0] <= start < cut[1]:
                out.append((index, text))
        return out

    def clear(self) -> None:
        self._waiting.clear()
