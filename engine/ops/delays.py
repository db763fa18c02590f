"""The token delay lines' steps (engine.families.moshi.lm.token_delays holds what they mean): on CUDA one
single-program kernel each (engine.kernels.delay_lines), otherwise the torch formulas below.
Integer work: the same tokens either way. tokens [slots, S] int64, forced [slots, S] bool,
o [1] int64 the input slot's counter; the index tensors are the DelayLines' constants."""
from __future__ import annotations

import torch

from . import dispatch


def force(tokens, forced, o, landing, streams, ones, codes: torch.Tensor, first: int) -> None:
    """Streams first.. take `codes`, each at slot o + its landing, marked forced."""
    if dispatch.use_triton(tokens):
        from ..kernels.delay_lines import force as kernel

        return kernel(tokens, forced, o, landing, codes, first)
    part = slice(first, first + codes.shape[0])
    rows = (o + landing[part]) % tokens.shape[0]
    tokens.index_put_((rows, streams[part]), codes)
    # A device-side True: a Python scalar here would be a synchronizing host copy.
    forced.index_put_((rows, streams[part]), ones[part])


def begin(tokens, forced, o, delays, initial, two) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The input and target slots, each stream not reached yet taking its initial token
    (forced), kept; returns (input tokens, target tokens, target forced)."""
    if dispatch.use_triton(tokens):
        from ..kernels.delay_lines import begin as kernel

        return kernel(tokens, forced, o, delays, initial)
    s = o + two  # the input and the target slot (two rows: the ring has at least two)
    rows, unreached = s % tokens.shape[0], s.unsqueeze(1) <= delays
    now = torch.where(unreached, initial, tokens.index_select(0, rows))
    now_forced = forced.index_select(0, rows) | unreached
    tokens.index_copy_(0, rows, now)
    forced.index_copy_(0, rows, now_forced)
    return now[0], now[1], now_forced[1]


def commit(tokens, forced, o, trail, streams, generated: torch.Tensor) -> torch.Tensor:
    """The generated tokens into the target slot where not forced, the input slot's marks
    cleared, o advanced; returns the tokens of the frame max_delay frames back."""
    if dispatch.use_triton(tokens):
        from ..kernels.delay_lines import commit as kernel

        return kernel(tokens, forced, o, trail, generated)
    slots, n = tokens.shape[0], generated.shape[0]
    target_row = (o + 1) % slots
    old = tokens.index_select(0, target_row)[0, :n]
    keep = forced.index_select(0, target_row)[0, :n]
    tokens[target_row, :n] = torch.where(keep, old, generated)
    forced.index_fill_(0, o % slots, False)
    o.add_(1)
    return tokens[(o + trail[:n]) % slots, streams[:n]]
