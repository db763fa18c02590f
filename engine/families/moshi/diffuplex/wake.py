"""A DiffuPlex wake: one backbone pass over the frames played since the last wake (they only
write history, as the single steps that generated them did), the current frame (generated as a
single step would be) and, with a predictor, K masked future positions, whose hidden states,
text tokens and known targets become the plan that `planned` later runs the depformer on.

Wakes read their inputs from buffers at fixed addresses and run as two stages of the Moshi
frame, keyed `("backbone", n, K)` and `("depformer", n, K)` for n frames caught up: at most
K + 1 shapes per K. A planned frame's depformer is one stage per position, `("planned", f)`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ....runtime.stages import Stage
from ..frame import MoshiFrame, depformer_steps, no_mark
from ..inputs import LMInputs, Wake
from ..lm.token_sampling import sample
from .predictor import Predictor


class Plan(NamedTuple):
    """The future positions of the last predicting wake, at fixed addresses (row f: the f-th
    frame after that wake's current one)."""
    hidden: torch.Tensor  # [reach, 1, 1, dim]
    text: torch.Tensor  # [reach] the sampled text token
    text_confidence: torch.Tensor  # [reach] float32: its probability's top
    target: torch.Tensor  # [reach, n_q + 1]
    forced: torch.Tensor  # [reach, n_q + 1] bool


class WakeInputs(NamedTuple):
    """A wake's inputs at fixed addresses, as its graph reads them."""
    user: torch.Tensor  # [reach, user_q]: the user's codes, frame by frame
    played: torch.Tensor  # [reach, 1 + dep_q]: the generated tokens of the frames caught up
    plan: Plan  # what a predicting wake writes


def wake_keys(n: int, k: int) -> tuple[tuple, tuple]:
    """The keys of a wake's two stages, over n frames caught up and k predicted."""
    return ("backbone", n, k), ("depformer", n, k)


def planned_key(f: int) -> tuple:
    """The key of the f-th planned frame's depformer."""
    return "planned", f


def new_wake_inputs(frame: MoshiFrame, reach: int) -> WakeInputs:
    cfg, device = frame.cfg, frame.runner.device
    plan = Plan(torch.zeros(reach, 1, 1, cfg.dim, dtype=frame.lm.dtype, device=device),
                torch.zeros(reach, dtype=torch.int64, device=device),
                torch.zeros(reach, dtype=torch.float32, device=device),
                torch.zeros(reach, 1 + cfg.n_q, dtype=torch.int64, device=device),
                torch.zeros(reach, 1 + cfg.n_q, dtype=torch.bool, device=device))
    return WakeInputs(torch.zeros(reach, cfg.user_q, dtype=torch.int64, device=device),
                      torch.zeros(reach, 1 + cfg.dep_q, dtype=torch.int64, device=device), plan)


class Wakes:
    """The wakes of one conversation over a Moshi frame whose state was sized for them
    (MoshiLM.regions(wake)). Make a new one when the store is replaced: captured wakes read
    this one's buffers."""

    def __init__(self, frame: MoshiFrame):
        self.frame = frame
        transformer = frame.lm.transformer
        self.reach = frame.runner.store[transformer.kv_region].shape[0] - transformer.cfg.ring + 1
        """Positions one wake may cover: what the state was sized for."""
        self.inputs = new_wake_inputs(frame, self.reach)
        self._staircases: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # by K: slots ahead, known
        self._bound: Predictor | None = None  # the predictor captured wake graphs read
        self._planned = 0  # rows of the plan that hold a prediction
        cfg, lines = frame.cfg, frame.lm.lines
        # A planned frame runs the depformer up to the user's semantic code (verification reads
        # it): the user codebooks whose target is the frame before's codes (lead + delay = 2)
        # are the microphone's when the frame plays (DiffuPlexLoop._play puts them in), and
        # nothing reads what the steps would give.
        trailing = [s > cfg.model_q and lines.lead + d == 2 for s, d in enumerate(cfg.delays)]
        self._planned_steps = [depformer_steps([a or b for a, b in zip(lines.known_ahead(f + 2), trailing)], cfg.dep_q)
                               for f in range(self.reach)]
        self._planned_at = -1  # the frame count the plan was made at: any later LM frame voids it

    def wake(self, frames: list[LMInputs], predictor: Predictor | None = None, k: int = 0,
             mark: Callable[[str], None] = no_mark) -> torch.Tensor | None:
        """One backbone wake over `frames` (the played ones carry their `generated` tokens;
        the last is the current frame) and, with a predictor, `k` masked future positions.
        Returns the current frame's output tokens (None during start-up): a graph's output
        when replayed, so copy them to keep them. The future positions leave nothing a later
        step reads as history."""
        n, frame = len(frames) - 1, self.frame
        self._check(frames, predictor, k)
        if predictor is not None:
            self.bind(predictor)
        self.inputs.user[:n + 1].copy_(torch.stack([f.user for f in frames]))
        if n:
            self.inputs.played[:n].copy_(torch.stack([f.generated for f in frames[:-1]]))
        keys = wake_keys(n, k)
        replay = frame.started and frame.runner.may_replay(keys)
        _, tokens, _ = frame.run_lm(keys, lambda: self._backbone(n, predictor, k), frames, mark, replay)
        self._planned, self._planned_at = k, frame.frames
        return tokens

    def bind(self, predictor: Predictor) -> None:
        """Captured wakes read the predictor's weights where they lie: another predictor drops
        every graph (the runner's graphs go together)."""
        if predictor is not self._bound:
            self.frame.runner.invalidate()
            self._bound = predictor

    def planned(self, f: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The f-th frame after the last wake's current one, as that wake predicted it: the
        depformer on the position's hidden state, run now (a position never played costs no
        depformer) up to the user's semantic code: past the plan's first frame the user
        codebooks that trail it are stale targets, which the loop replaces with the
        microphone's. Returns (its text token and codebooks [1 + dep_q], model's then user's;
        its confidence: the lower of the text token's and the first codebook's top
        probability). The outputs are a graph's when replayed: copy what must be kept."""
        planned = self._current()
        if not 0 <= f < planned:
            raise ValueError(f"frame {f} of the plan: the last wake planned {planned}")
        return self.frame.runner.run(Stage(planned_key(f), lambda: self._planned_frame(f)), self.frame.started)

    def planned_text(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The text tokens the last wake planned, and their confidence (the top of their
        probabilities): [k] each, on the device (graph outputs when replayed)."""
        plan, planned = self.inputs.plan, self._current()
        return plan.text[:planned], plan.text_confidence[:planned]

    def _current(self) -> int:
        """Rows of the plan that are still the future: none once another LM frame ran."""
        return self._planned if self._planned_at == self.frame.frames else 0

    def _check(self, frames: list[LMInputs], predictor: Predictor | None, k: int) -> None:
        if predictor is None and k:
            raise ValueError("future positions need a predictor")
        if predictor is not None and not 1 <= k <= predictor.spec.block:
            raise ValueError(f"k = {k}: the predictor was trained for blocks of 1..{predictor.spec.block}")
        if len(frames) + k > self.reach:
            raise ValueError(f"a wake over {len(frames) + k} positions; the state was sized for {self.reach}")
        if (self.frame.frames < self.frame.lm.lines.lead or any(f.generated is None for f in frames[:-1])
                or any(f.user is None or f.model is not None or f.text is not None or f.embedding is not None
                       for f in frames)):
            raise ValueError("a wake runs after the start-up frame, on the user's codes and known generated tokens")

    # --- the stages ------------------------------------------------------------------------

    def _backbone(self, n: int, predictor: Predictor | None, k: int) -> Wake:
        frame, inputs = self.frame, self.inputs
        frames = [LMInputs(inputs.user[i], generated=inputs.played[i]) for i in range(n)]
        frames.append(LMInputs(inputs.user[n]))
        rows, target, forced = frame.frame_rows(frames)
        if k:
            masked, future_target, future_forced = self._masked_rows(predictor, k)
            rows.append(masked)
        x = rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)
        adapter = predictor.at_last(k) if k else None
        h, text_logits = frame.lm.backbone(x, frame.runner.store, adapter, future=k)
        wake = frame.wake_of(x, len(frames), h, text_logits, target, forced)
        if k:  # into the plan, where `planned` reads it
            plan, future_logits = inputs.plan, text_logits[1:]
            plan.text[:k].copy_(sample(future_logits, frame.text_sampling, frame.generator))
            plan.text_confidence[:k].copy_(torch.softmax(future_logits.float(), dim=-1).amax(dim=-1))
            plan.hidden[:k].copy_(h[:, 1:].view(k, 1, 1, -1))
            plan.target[:k].copy_(future_target)
            plan.forced[:k].copy_(future_forced)
        return wake

    def _planned_frame(self, f: int) -> tuple[torch.Tensor, torch.Tensor]:
        plan = self.inputs.plan
        row, first = self.frame.codebooks(plan.hidden[f], plan.text[f:f + 1], plan.target[f], plan.forced[f],
                                          self._planned_steps[f])
        n = row.shape[0]  # tokens known already stay as they are, as a commit keeps them
        generated = torch.where(plan.forced[f, :n], plan.target[f, :n], row)
        return generated, torch.minimum(plan.text_confidence[f], torch.softmax(first.float(), dim=-1).amax())

    def _masked_rows(self, predictor: Predictor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The k future positions' input embeddings [1, k, dim] (a stream's token where it is
        known, its MASK embedding where not) and, for each, the target tokens known already
        and which. Known: the user's codes of the current frame, which land `lead + delay`
        slots ahead (the staircase: each stream becomes unknown at its own delay); nothing the
        model generates is known past the current frame."""
        lm, store = self.frame.lm, self.frame.runner.store
        lines = lm.lines
        if k not in self._staircases:  # on the device once: a host tensor here would synchronize
            known = [lines.known_ahead(f) for f in range(1, k + 2)]
            device = self.frame.runner.device
            self._staircases[k] = (torch.arange(1, k + 1, device=device), torch.tensor(known, device=device))
        ahead, known = self._staircases[k]
        tokens = store[lines.tokens_region]
        slots = (store[lines.slot_region] + ahead) % lines.slots
        x = lm.embed_known(tokens.index_select(0, slots), known[:k], predictor.mask_embeddings)
        targets = tokens.index_select(0, (slots + 1) % lines.slots)
        return x, targets, known[1:]
