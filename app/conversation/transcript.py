"""The transcript format the app's recordings and `offline` share: the model's words, each
with its start and end in seconds, from the text pieces it emits frame by frame."""
from __future__ import annotations

import re

from engine import FRAME_SECONDS

_PARTS = re.compile(r"\s*\S+|\s+")


class Words:
    """Words as the pieces arrive: a piece that begins with a space starts a new word; a word
    ends at the end of the frame of its last piece."""

    def __init__(self):
        self.words: list[dict] = []

    def add(self, index: int, piece: str) -> None:
        """The text piece of frame `index` ("" for none)."""
        start, end = index * FRAME_SECONDS, (index + 1) * FRAME_SECONDS
        for part in _PARTS.findall(piece):  # a frame may begin several words
            if part[0].isspace() or not self.words:
                self.words.append({"word": part.strip(), "start": round(start, 3), "end": round(end, 3)})
            else:
                self.words[-1]["word"] += part
                self.words[-1]["end"] = round(end, 3)

    def finished(self) -> list[dict]:
        """The words so far (a piece of only spaces makes none)."""
        return [w for w in self.words if w["word"]]


def words_with_times(pieces: list[str]) -> list[dict]:
    """Per-frame text pieces -> words with start/end seconds."""
    words = Words()
    for index, piece in enumerate(pieces):
        words.add(index, piece)
    return words.finished()
