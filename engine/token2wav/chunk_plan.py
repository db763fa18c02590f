"""The host side of a token2wav stream: what one call of the flow does, computed from host
counters only, before any device work.

A plan (`FlowPlan`) fixes every shape and every host branch of the flow's work for one call:
how many tokens come in, the conformer's and the estimator's cache lengths, and the stock
retention it applies afterwards (which estimator rows stay, in which order; whether the
conformer's cache is trimmed). Equal plans mean the same device work, so a plan is the key of
a captured CUDA graph (engine.token2wav.token2wav_stream). Once a stream's caches are at their retention
(the prompt and RETAINED_FRAMES), every one-second chunk has the same plan.

Nothing here touches a tensor: the plans of a whole stream can be computed ahead of it (what
the stream's warm-up does to capture the first chunks and the steady one at creation).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

RETAINED_FRAMES = 100
"""Mel frames of history the caches keep beyond the voice prompt."""


@dataclasses.dataclass(frozen=True)
class FlowCounters:
    """What the host knows of the flow's caches between calls."""
    enc_tokens: int = 0
    """Token entries in the conformer's cache."""
    est_order: tuple[int, ...] = ()
    """The estimator's rows in use, in the stock cache's order (its newest chunk first)."""


@dataclasses.dataclass(frozen=True)
class FlowPlan:
    """One call of the flow: its shapes and branches (hashable: a graph key)."""
    tokens: int  # tokens given: fresh ones plus the lookahead, or a last chunk's
    fresh: int  # tokens that get mel now
    frames: int  # mel frames they make (and attention rows added to each cache)
    last: bool  # no lookahead follows: zeros stand in for it
    prompt: bool  # the voice prompt, conditioned on its mel (later calls: on zeros)
    enc_tokens: int  # the conformer's cache length before the call, in tokens
    est_rows: int  # the estimator's cache length before the call, in rows
    est_kept: tuple[int, ...] | None  # after it: the estimator rows kept, gathered in this order
    enc_trim: bool  # after it: the conformer's cache is cut to the prompt and the retained frames


def plan_flow(counters: FlowCounters, tokens: int, last: bool, *, prompt_frames: int, up: int, lookahead: int,
              prompt: bool = False) -> tuple[FlowPlan, FlowCounters]:
    """The plan of a call with `tokens` tokens and the counters after it.

    Retention, the stock Token2wav's after every chunk (not after the prompt): keep the first
    prompt-length and the last RETAINED_FRAMES entries of each cache as the stock lists them.
    Its conformer cache lists rows oldest first (the prompt's rows and the newest stay;
    token-rate layers at half rate), as they are stored. Its estimator cache puts each chunk's
    rows before the older ones, so which rows stay follows that order; attention there has no
    positions, so the kept rows are compacted in any physical order (here: the stock's)."""
    fresh = tokens - (0 if last else lookahead)
    frames = up * fresh
    used = len(counters.est_order)
    order = tuple(range(used, used + frames)) + counters.est_order  # the stock puts new rows first
    enc_tokens = counters.enc_tokens + fresh
    keep, tail = prompt_frames, RETAINED_FRAMES
    est_kept = None
    if not prompt and len(order) > keep + tail:
        est_kept = order[:keep] + order[-tail:]
        order = tuple(range(len(est_kept)))
    enc_trim = not prompt and up * enc_tokens > keep + tail
    if enc_trim:
        enc_tokens = keep // up + tail // up
    plan = FlowPlan(tokens, fresh, frames, last, prompt, counters.enc_tokens, used, est_kept, enc_trim)
    return plan, FlowCounters(enc_tokens, order)


def chunk_bounds(count: int, lookahead: int, size: int) -> Iterator[tuple[int, int, bool]]:
    """(start, stop, last) of each call streaming `count` tokens: `size` fresh tokens plus
    `lookahead` more (which the next call repeats), then the rest as the last call."""
    start = 0
    while start + size + lookahead <= count:
        yield start, start + size + lookahead, False
        start += size
    yield start, count, True
