"""The session's audio to and from a family's own. The app and `offline` exchange audio with
the session at SAMPLE_RATE in periods of FRAME_SIZE samples (engine.period); a family hears at
its input rate in steps of its own length and speaks at its output rate, any amount a step
(none on some steps, more than a step's worth on others). Microphone audio is made finite,
converted and buffered to the step in the memory the device reads; the family's speech is
converted and queued, and given out a period at a time. A family whose rates are the session's
and whose step is the period passes through without a copy beyond the one the device needs.

A step's text is queued with its speech, its words spread evenly over it, and given out with
the period that plays each word's start: a once-a-second model's words appear as they are
spoken, and an interruption drops the words of the speech it drops."""
from __future__ import annotations

import collections
import re

import numpy as np
import soxr
import torch

from ..files.finite import finite_into
from ..period import FRAME_SIZE, SAMPLE_RATE

_EMPTY = np.zeros(0, dtype=np.float32)
_CJK = "\u3000-\u9fff\uac00-\ud7af\uff00-\uffef"
_PIECES = re.compile(rf"\s*(?:[{_CJK}]|[^\s{_CJK}]+)\s*$|\s*(?:[{_CJK}]|[^\s{_CJK}]+)|\s+")
"""A word with the space before it (and, at the end, after it); each CJK character its own."""


def text_pieces(text: str) -> list[str]:
    """`text` as the pieces it is shown in, which join back to it."""
    return _PIECES.findall(text)


class StepAudio:
    def __init__(self, input_rate: int, output_rate: int, step_samples: int, device: torch.device):
        self.input_rate, self.output_rate, self.step_samples = input_rate, output_rate, step_samples
        self._pinned = torch.device(device).type == "cuda"
        self._in = torch.empty(step_samples, dtype=torch.float32, pin_memory=self._pinned)
        self._in_host = self._in.numpy()  # the same memory: a step's samples are written once
        self._scratch = np.empty(FRAME_SIZE, dtype=np.float32)
        self._out = torch.empty(0, dtype=torch.float32, pin_memory=self._pinned)
        self.reset()

    def reset(self) -> None:
        """A new conversation: nothing buffered, nothing queued, the converters fresh."""
        self._filled, self._waiting, self._queue, self._out_n = 0, _EMPTY, _EMPTY, 0
        self._given = 0  # samples of speech given out so far
        self._words: collections.deque[tuple[int, str]] = collections.deque()  # (sample it starts at, piece)
        self._text_out = ""
        self._to_family = self._converter(SAMPLE_RATE, self.input_rate)
        self._from_family = self._converter(self.output_rate, SAMPLE_RATE)

    @staticmethod
    def _converter(rate_in: int, rate_out: int) -> soxr.ResampleStream | None:
        return None if rate_in == rate_out else soxr.ResampleStream(rate_in, rate_out, 1, dtype="float32",
                                                                    quality="HQ")

    def step_buffer(self) -> torch.Tensor:
        """The buffer a step's input is read from (the family's step, at its input rate)."""
        return self._in

    # --- in ------------------------------------------------------------------------------------

    def take(self, pcm: np.ndarray) -> int:
        """A period of microphone audio; returns how many of its samples were not finite
        (replaced: engine.files.finite). Call only while no step reads the step buffer."""
        fits = self._filled + FRAME_SIZE <= self.step_samples
        if self._to_family is None and not len(self._waiting) and fits:
            end = self._filled + FRAME_SIZE
            replaced = finite_into(self._in_host[self._filled:end], pcm)
            self._filled = end
            return replaced
        replaced = finite_into(self._scratch, pcm)
        converted = self._scratch if self._to_family is None else self._to_family.resample_chunk(self._scratch)
        self._waiting = np.concatenate([self._waiting, converted])
        return replaced

    def next_step(self) -> torch.Tensor | None:
        """The step buffer once a step's audio is in it (the next step's audio is moved in only
        at the next call: after the step that reads it has run), else None."""
        if len(self._waiting) and self._filled < self.step_samples:
            n = min(self.step_samples - self._filled, len(self._waiting))
            self._in_host[self._filled:self._filled + n] = self._waiting[:n]
            self._filled, self._waiting = self._filled + n, self._waiting[n:]
        if self._filled < self.step_samples:
            return None
        self._filled = 0
        return self._in

    # --- out -----------------------------------------------------------------------------------

    def queue(self, out: torch.Tensor | None) -> None:
        """A step's speech on the device (None: none), copied to the host without waiting;
        `queued()` once the device is done."""
        self._out_n = 0 if out is None else out.numel()
        if self._out_n > self._out.numel():
            self._out = torch.empty(self._out_n, dtype=torch.float32, pin_memory=self._pinned)
        if out is not None:
            self._out[:self._out_n].copy_(out.view(-1), non_blocking=True)

    def queued(self, text: str = "") -> None:
        """The step's speech (copied by now) joins the queue, at the session's rate, with its
        text spread over it (text without speech comes out after the speech before it)."""
        speech = self._out.numpy()[:self._out_n]
        if self._from_family is not None:
            speech = self._from_family.resample_chunk(speech)
        start = self._given + len(self._queue)
        pieces = text_pieces(text)
        self._words.extend((start + i * len(speech) // len(pieces), piece) for i, piece in enumerate(pieces))
        self._queue = speech.copy() if not len(self._queue) else np.concatenate([self._queue, speech])

    def drop_speech(self) -> int:
        """The speech queued and not yet given out is dropped (the user interrupted it), and
        its words; returns how many samples (at the session's rate)."""
        dropped, self._queue = len(self._queue), _EMPTY
        self._words.clear()
        return dropped

    def period_out(self) -> np.ndarray:
        """The next period of speech (silence where the queue runs short); `period_text()` is
        the text whose speech starts in it."""
        n = min(FRAME_SIZE, len(self._queue))
        words, until = [], self._given + max(n, 1)
        while self._words and self._words[0][0] < until:
            words.append(self._words.popleft()[1])
        self._text_out, self._given = "".join(words), self._given + n
        if n == FRAME_SIZE and len(self._queue) == FRAME_SIZE:
            out, self._queue = self._queue, _EMPTY
            return out
        out = np.zeros(FRAME_SIZE, dtype=np.float32)
        out[:n], self._queue = self._queue[:n], self._queue[n:]
        return out

    def period_text(self) -> str:
        """The text given out with the last period."""
        return self._text_out
