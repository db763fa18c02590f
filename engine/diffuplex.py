"""DiffuPlex in a conversation: one backbone wake predicts a block of future frames, and the
conversation consumes a confident prefix of it at the normal 80 ms cadence.

Each frame, once the user's audio of it is encoded:
- if a predicted frame is planned for now, the policy checks it: `listen` consumes it only
  while the assistant is predicted silent (a padding text token), `speak` also while it
  speaks; both only with confidence >= tau, and only if the user said what was predicted
  (the predicted user semantic code against the real one, `verify="semantic"`). The text
  token and its confidence came with the wake (read on the host, no wait); if they pass, the
  depformer runs on the hidden state the wake left for this frame (its codebooks and the
  user's, and the first codebook's confidence), and the rest is checked on the device. A
  consumed frame is played as predicted, with no backbone run;
- otherwise the backbone wakes: one forward over the frames consumed since the last wake
  (they enter history as they were played, with the user's real codes), the current frame
  (generated as a single AR step would be) and K masked future positions, which become the
  new plan. A frame the check refused discards what is left of the plan: audio already
  played stays as played; only the unplayed future is predicted again.

`ar` never predicts. The output frame is assembled as the delay lines assemble it: streams
without delay from the previous frame's generated tokens, delayed ones from this frame's.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .diffuplex_stats import WakeReport
from .lm.predictor import Predictor
from .options import RuntimeOptions
from .runtime.runner import FrameRunner, LMInputs


class DiffuPlexLoop:
    def __init__(self, runner: FrameRunner, predictor: Predictor):
        cfg = runner.lm.cfg
        if max(cfg.delays) != 1:
            raise ValueError("DiffuPlex assembles output frames for delays of 0 and 1")
        self.runner, self.predictor = runner, predictor
        self._user_semantic = 1 + cfg.model_q
        self.accept_first: int | None = None
        """Benchmarks only: play exactly this many predicted frames after each wake, whatever
        the checks say (a full-size predictor with random weights is never confident); the
        next one is refused as LISTEN refuses a speaking frame (before its depformer runs) or
        as SPEAK refuses a wrong user prediction (after)."""
        self._silent_ids = (cfg.text_padding_id, cfg.text_end_padding_id)
        self._silent = torch.tensor(self._silent_ids, device=runner.device)
        # Each wake's text tokens and their confidence, copied to the host as the wake ends (no
        # wait: the frame's own sync lands them), so later frames refuse without the depformer.
        pinned = runner.device.type == "cuda"
        self._text = torch.zeros(predictor.spec.block, dtype=torch.int64, pin_memory=pinned)
        self._text_confidence = torch.zeros(predictor.spec.block, dtype=torch.float32, pin_memory=pinned)
        self._undelayed = torch.tensor([d == 0 for d in cfg.delays[:1 + cfg.dep_q]], device=runner.device)
        self.reset()

    def reset(self) -> None:
        self._planned = 0  # frames the last wake predicted
        self._next = 0  # the next of them to play
        self._consumed: list[LMInputs] = []
        self._previous: torch.Tensor | None = None  # the last frame's generated tokens

    @property
    def pending(self) -> bool:
        """Frames played from a prediction are not in history yet."""
        return bool(self._consumed)

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark: Callable[[str], None]
             ) -> tuple[torch.Tensor, torch.Tensor, WakeReport]:
        """One frame (output under way): pcm [frame_size] -> (output tokens [1 + dep_q], pcm on
        the device, what was done)."""
        runner = self.runner
        user = runner.encode(pcm)
        mark("encode")
        planned = self._next < self._planned and options.policy != "ar" and self._text_allows(options)
        if planned:
            generated, confidence = runner.planned(self._next)
            mark("depformer")
        if planned and self._accepts(generated, confidence, user, options):
            generated = generated.clone()  # graph outputs: the next replay overwrites them
            self._next += 1
            self._consumed.append(LMInputs(user.clone(), generated=generated))
            tokens = torch.where(self._undelayed, self._previous, generated)
            self._previous = generated
            report = WakeReport(woke=False, discarded=0)
        else:
            frames = [*self._consumed, LMInputs(user)]
            discarded = 0 if options.policy == "ar" else self._planned - self._next  # AR: not a revision
            k = 0 if options.policy == "ar" else min(options.block, self.predictor.spec.block)
            # A graph's output: copied, since the decode graph replays before the session reads it.
            tokens = runner.wake(frames, self.predictor if k else None, k, mark).clone()
            if k:
                text, confidence = runner.planned_text()
                self._text[:k].copy_(text, non_blocking=True)
                self._text_confidence[:k].copy_(confidence, non_blocking=True)
            self._planned, self._next, self._consumed = k, 0, []
            self._previous = runner.last_generated().clone()
            report = WakeReport(woke=True, discarded=discarded)
        out = runner.decode(tokens)
        mark("decode")
        return tokens, out, report

    def _text_allows(self, options: RuntimeOptions) -> bool:
        """What the wake's text prediction decides alone, on the host: the text token's
        confidence, and for LISTEN whether the assistant is predicted silent."""
        if self.accept_first is not None:
            return self._next < self.accept_first or options.policy == "speak"
        i = self._next
        return (float(self._text_confidence[i]) >= options.tau
                and (options.policy != "listen" or int(self._text[i]) in self._silent_ids))

    def _accepts(self, generated: torch.Tensor, confidence: torch.Tensor, user: torch.Tensor,
                 options: RuntimeOptions) -> bool:
        checks = [confidence >= options.tau]
        if options.verify == "semantic":
            checks.append(generated[self._user_semantic] == user[0])
        if options.policy == "listen":
            checks.append((generated[0] == self._silent).any())
        accepted = bool(torch.stack(checks).all())  # one read of the device
        return accepted if self.accept_first is None else self._next < self.accept_first
