"""The token delay lines' three per-frame steps (engine.families.moshi.lm.token_delays), each one single-program
kernel: writing outside tokens, beginning a frame, committing it. In torch each is four to
twelve small kernels of index arithmetic over a ring of a few rows of 17 tokens; here each is
one launch. Integer work only: the same tokens as the torch formulas, exactly.

Rings: tokens [slots, S] int64 and forced [slots, S] bool, row r the slot r (mod slots); the
slot counter o [1] int64. All positions come from o on the device, so a captured graph serves
every frame.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import overlap


@triton.jit
def _force_kernel(TOKENS, FORCED, O, LANDING, CODES, first, n, slots, S: tl.constexpr, BS: tl.constexpr,
                  PDL: tl.constexpr):
    """Streams first .. first + n - 1 take CODES, each at slot o + its landing, forced."""
    overlap.enter(PDL)
    i = tl.arange(0, BS)
    ok = i < n
    s = first + i
    row = (tl.load(O) + tl.load(LANDING + s, mask=ok, other=0)) % slots
    tl.store(TOKENS + row * S + s, tl.load(CODES + i, mask=ok, other=0), mask=ok)
    tl.store(FORCED + row * S + s, tl.full([BS], 1, tl.int1), mask=ok)


@triton.jit
def _begin_kernel(TOKENS, FORCED, O, DELAYS, INITIAL, NOW, TARGET, TARGET_FORCED, slots,
                  S: tl.constexpr, BS: tl.constexpr, PDL: tl.constexpr):
    """The input slot o and the target slot o + 1: each stream not reached yet (slot <= its
    delay) takes its initial token, forced; both rows kept, and returned."""
    overlap.enter(PDL)
    i = tl.arange(0, BS)
    ok = i < S
    o = tl.load(O)
    delay = tl.load(DELAYS + i, mask=ok, other=0)
    initial = tl.load(INITIAL + i, mask=ok, other=0)
    for k in tl.static_range(2):
        row = (o + k) % slots
        unreached = o + k <= delay
        token = tl.where(unreached, initial, tl.load(TOKENS + row * S + i, mask=ok, other=0))
        forced = (tl.load(FORCED + row * S + i, mask=ok, other=0) != 0) | unreached
        tl.store(TOKENS + row * S + i, token, mask=ok)
        tl.store(FORCED + row * S + i, forced, mask=ok)
        if k == 0:
            tl.store(NOW + i, token, mask=ok)
        else:
            tl.store(TARGET + i, token, mask=ok)
            tl.store(TARGET_FORCED + i, forced, mask=ok)


@triton.jit
def _commit_kernel(TOKENS, FORCED, O, TRAIL, GENERATED, OUT, n, slots, S: tl.constexpr, BS: tl.constexpr,
                   PDL: tl.constexpr):
    """The generated tokens into the target slot o + 1 where not forced; the input slot's
    forced marks cleared; o advanced; OUT the tokens of the frame max_delay frames back."""
    overlap.enter(PDL)
    i = tl.arange(0, BS)
    o = tl.load(O)
    target = ((o + 1) % slots) * S + i
    first = i < n
    keep = tl.load(FORCED + target, mask=first, other=0) != 0
    old = tl.load(TOKENS + target, mask=first, other=0)
    tl.store(TOKENS + target, tl.where(keep, old, tl.load(GENERATED + i, mask=first, other=0)), mask=first)
    tl.store(FORCED + (o % slots) * S + i, tl.zeros([BS], tl.int1), mask=i < S)
    tl.debug_barrier()  # the target row written before it is read back below
    row = (o + 1 + tl.load(TRAIL + i, mask=first, other=0) + slots) % slots  # trail > -slots: never negative
    tl.store(OUT + i, tl.load(TOKENS + row * S + i, mask=first, other=0), mask=first)
    tl.store(O, o + 1)


def force(tokens, forced, o, landing, codes, first: int) -> None:
    S = tokens.shape[1]
    _force_kernel[(1,)](tokens, forced, o, landing, codes, first, codes.shape[0], tokens.shape[0], S=S,
                        BS=triton.next_power_of_2(S), num_warps=1, **overlap.launch(tokens.device))


def begin(tokens, forced, o, delays, initial) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    S = tokens.shape[1]
    now, target = torch.empty(S, dtype=tokens.dtype, device=tokens.device), torch.empty_like(tokens[0])
    target_forced = torch.empty(S, dtype=torch.bool, device=tokens.device)
    _begin_kernel[(1,)](tokens, forced, o, delays, initial, now, target, target_forced, tokens.shape[0], S=S,
                        BS=triton.next_power_of_2(S), num_warps=1, **overlap.launch(tokens.device))
    return now, target, target_forced


def commit(tokens, forced, o, trail, generated) -> torch.Tensor:
    S, n = tokens.shape[1], generated.shape[0]
    out = torch.empty(n, dtype=tokens.dtype, device=tokens.device)
    _commit_kernel[(1,)](tokens, forced, o, trail, generated, out, n, tokens.shape[0], S=S,
                         BS=triton.next_power_of_2(S), num_warps=1, **overlap.launch(tokens.device))
    return out
