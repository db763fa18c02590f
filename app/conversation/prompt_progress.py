"""How far a model's voice and role prompts have played, shown only once they take long:
short prompts (the usual) pass in silence, a long one is not minutes without a word."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

SHOWN_AFTER_S = 2.0
"""Seconds of prompts before their progress is shown."""


class PromptProgress:
    """A `progress(done, total)` for DuplexSession.reset: calls `show(done, total)` at most every
    `every_s` once the prompts have played for SHOWN_AFTER_S, and at their end if it showed
    anything. A replay starts again at frame 1 (a GPU's preparation replays them once more)."""

    def __init__(self, show: Callable[[int, int], None], every_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.show, self.every_s, self.clock = show, every_s, clock
        self._started = self._shown = None

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if done <= 1 or self._started is None:
            self._started, self._shown = now, None
        if self._shown is None:
            if now - self._started < SHOWN_AFTER_S or done >= total:
                return
        elif done < total and now - self._shown < self.every_s:
            return
        self._shown = now
        self.show(done, total)


def cli_prompt_progress(stream=None) -> PromptProgress:
    """The offline command's: on a terminal one line redrawn in place, elsewhere a plain line
    a second (a log or a pipe gets no carriage returns)."""
    def show(done: int, total: int) -> None:
        out = stream or sys.stderr
        text = f"playing the voice and role prompts: {done}/{total} frames ({100 * done // total} %)"
        if out.isatty():
            out.write(f"\r{text}" + ("\n" if done >= total else ""))
        else:
            out.write(text + "\n")
        out.flush()

    return PromptProgress(show, every_s=0.1 if (stream or sys.stderr).isatty() else 1.0)


def window_prompt_text(done: int, total: int) -> str:
    """The status line while the window's conversation plays its prompts."""
    return f"Playing the voice and role prompts to the model… {100 * done // total} %"
