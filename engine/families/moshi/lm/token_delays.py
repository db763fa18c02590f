"""Token delay lines: the per-stream slots the LM reads its input from and writes its output to.

Slot s holds one token per stream (text, model codebooks, user codebooks). A stream with delay d is
written d slots late: the acoustic codebooks trail the semantic one by a frame. Each frame reads its
input from slot `o` and generates slot `o + 1`; slots that no stream has reached yet (s <= d) hold
the start-of-stream ("initial") token. A token written from outside (the user's codes, or prompt
tokens) is *forced*: the depformer is teacher-forced on it and sampling never overwrites it. `lead`
is how many slots past the input slot this frame's outside tokens land: 0 in Moshi (the user's
semantic code of this frame enters the temporal transformer now), 1 in PersonaPlex (it enters next
frame, and this frame's depformer is teacher-forced on it). The ring has `max_delay + 2 + lead`
slots (the reference's cache length for each model), so a PersonaPlex voice prompt's saved cache
maps slot for slot. All indices are device tensors: nothing here synchronizes with the host.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ....ops import delays
from ....state import Region, Store
from .lm_config import LMConfig


class _Constants(NamedTuple):
    """A device's constant index tensors, made once: a frame's few dozen small kernels would
    otherwise include one more for each of them, every frame."""
    delays: torch.Tensor  # [S] each stream's delay
    initial: torch.Tensor  # [S] each stream's start token
    landing: torch.Tensor  # [S] lead + delay: how far past the input slot an outside token lands
    trail: torch.Tensor  # [S] delay - max_delay: where a committed frame's output lies from the new slot
    streams: torch.Tensor  # [S] 0 .. S - 1
    ones: torch.Tensor  # [S] bool, True
    two: torch.Tensor  # [2] 0, 1: the input slot and the target slot


class DelayLines:
    def __init__(self, cfg: LMConfig, name: str):
        self.cfg = cfg
        self.lead = 1 if cfg.variant == "personaplex" else 0
        self.slots = cfg.max_delay + 2 + self.lead
        self.tokens_region, self.forced_region, self.slot_region = (
            f"{name}.tokens", f"{name}.forced", f"{name}.slot")
        self._consts: dict[torch.device, _Constants] = {}

    def regions(self) -> list[Region]:
        # Declared whole ("fixed"), not as frame-clocked rings: outside tokens land up to
        # lead + max_delay slots ahead of the clock, so every slot is live from the first frame.
        shape = (self.slots, self.cfg.n_q + 1)
        return [Region(self.tokens_region, shape, torch.int64),
                Region(self.forced_region, shape, torch.bool),
                Region(self.slot_region, (1,), torch.int64)]

    def _constants(self, device: torch.device) -> _Constants:
        if device not in self._consts:
            c = self.cfg

            def ints(values: list[int]) -> torch.Tensor:
                return torch.tensor(values, dtype=torch.int64, device=device)

            self._consts[device] = _Constants(
                ints(list(c.delays)), ints([c.text_card] + [c.card] * c.n_q), ints([self.lead + d for d in c.delays]),
                ints([d - c.max_delay for d in c.delays]), ints(list(range(c.n_q + 1))),
                torch.ones(c.n_q + 1, dtype=torch.bool, device=device), ints([0, 1]))
        return self._consts[device]

    def force(self, store: Store, first: int, codes: torch.Tensor) -> None:
        """Write outside tokens for streams first.. (codes [n] on the device), each at
        slot o + lead + its delay."""
        c = self._constants(codes.device)
        delays.force(store[self.tokens_region], store[self.forced_region], store[self.slot_region], c.landing,
                     c.streams, c.ones, codes, first)

    def begin_frame(self, store: Store) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fill not-yet-reached slots with initial tokens; return (input tokens [n_q + 1],
        target tokens, target forced mask) for this frame."""
        tokens = store[self.tokens_region]
        c = self._constants(tokens.device)
        return delays.begin(tokens, store[self.forced_region], store[self.slot_region], c.delays, c.initial, c.two)

    def commit(self, store: Store, generated: torch.Tensor) -> torch.Tensor:
        """Store the generated tokens (text + dep_q codebooks) where not forced, advance the
        slot, and return the output tokens [dep_q + 1] of the frame max_delay frames back."""
        tokens = store[self.tokens_region]
        c = self._constants(tokens.device)
        return delays.commit(tokens, store[self.forced_region], store[self.slot_region], c.trail, c.streams,
                             generated)

    def known_targets(self, now: frozenset[int], before: frozenset[int]) -> list[bool]:
        """Which streams' tokens in this frame's target slot are forced, as the host knows it
        from the streams written from outside this frame (`now`) and in the frame before
        (`before`): a token written from outside lands lead + delay slots past the input slot
        and the target is one past it, so it was written this frame (lead + delay = 1) or the
        one before (2). At a conversation's first frame any `before` holds: the slot two past
        the first input slot is one no stream with lead + delay = 2 has reached (forced)."""
        return [(self.lead + d == 1 and s in now) or (self.lead + d == 2 and s in before)
                for s, d in enumerate(self.cfg.delays)]

    def known_ahead(self, ahead: int) -> list[bool]:
        """Which streams' tokens `ahead` slots past the current input slot are known before the
        model generates them: the user's codes of the current frame, which land lead + delay
        slots ahead (the staircase of a DiffuPlex wake); nothing the model generates."""
        c = self.cfg
        user = [False] * (1 + c.model_q) + [True] * c.user_q
        return [u and ahead <= self.lead + d for u, d in zip(user, c.delays)]

    def load_cache(self, store: Store, cache: torch.Tensor) -> None:
        """Replace every slot's tokens (cache [slots, n_q + 1], slot s at row s % slots)."""
        store[self.tokens_region].copy_(cache)
