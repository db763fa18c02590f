"""DiffuPlex in a conversation: a backbone wake predicts a block of future frames, of which the
conversation consumes a confident prefix at the normal 80 ms cadence. Each frame, its user audio
encoded, a predicted frame planned for it is checked: `listen` consumes it only while the assistant
is predicted silent (a padding text token), `speak` also while it speaks, both only with
confidence >= tau and if the user said what was predicted (the user's real semantic code against the
predicted, `verify="semantic"`). The text token and its confidence came with the wake (on the host:
no wait); if they pass, the depformer runs on the wake's hidden state for this frame and the rest is
checked on the device; a consumed frame plays as predicted (no backbone run). Else the backbone
wakes: one forward over the frames consumed since its last wake (into history as played, with the
user's real codes), the current frame (as by an AR step) and K masked future positions, the new
plan; a refused frame discards the plan's unplayed rest. `ar` never predicts. Frames are assembled
as by the delay lines: undelayed streams from the previous frame's tokens, delayed from this one's.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ....options import RuntimeOptions
from ..frame import PLAY_KEY, no_mark
from ..inputs import LMInputs
from .acceptance import PlayFirst, PolicyChecks
from .predictor import Predictor
from .stats import WakeReport
from .wake import Wakes, planned_key, wake_keys


class DiffuPlexLoop:
    """`checks`: what decides whether a planned frame plays (PolicyChecks by default)."""

    def __init__(self, wakes: Wakes, predictor: Predictor, checks: PolicyChecks | None = None):
        frame = wakes.frame
        cfg, device = frame.cfg, frame.runner.device
        if max(cfg.delays) != 1:
            raise ValueError("DiffuPlex assembles output frames for delays of 0 and 1")
        self.frame, self.wakes, self.predictor = frame, wakes, predictor
        self.checks = checks or PolicyChecks(cfg, device)
        # Each wake's text tokens and their confidence, copied to the host as the wake ends (no
        # wait: the frame's own sync lands them), so later frames refuse without the depformer.
        pinned = device.type == "cuda"
        self._text = torch.zeros(predictor.spec.block, dtype=torch.int64, pin_memory=pinned)
        self._text_confidence = torch.zeros(predictor.spec.block, dtype=torch.float32, pin_memory=pinned)
        self._undelayed = torch.tensor([d == 0 for d in cfg.delays[:1 + cfg.dep_q]], device=device)
        lead = frame.lm.lines.lead
        self._user_trailing = torch.tensor([lead + d == 2 for d in cfg.delays[1 + cfg.model_q:]], device=device)
        self._user_first = 1 + cfg.model_q
        self.reset()

    def reset(self) -> None:
        self._planned = 0  # frames the last wake predicted
        self._next = 0  # the next of them to play
        self._consumed: list[LMInputs] = []
        self._previous: torch.Tensor | None = None  # the last frame's generated tokens

    def block(self, options: RuntimeOptions) -> int:
        """K: the future frames a predicting wake plans under `options`."""
        return min(options.block, self.predictor.spec.block)

    @property
    def pending(self) -> bool:
        """Frames played from a prediction are not in history yet."""
        return bool(self._consumed)

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark: Callable[[str], None]
             ) -> tuple[torch.Tensor, torch.Tensor, WakeReport]:
        """One frame (output under way): pcm [frame_size] -> (output tokens [1 + dep_q], pcm on
        the device, what was done)."""
        frame, wakes, i = self.frame, self.wakes, self._next
        user = frame.encode(pcm)
        mark("encode")
        checked = i < self._planned and options.policy != "ar"
        # Read before a wake: it copies the next plan's confidences over these.
        checked_confidence = float(self._text_confidence[i]) if checked else None
        planned = checked and self.checks.text_allows(i, self._text, self._text_confidence, options)
        if planned:
            generated, confidence = wakes.planned(i)
            mark("depformer")
        if planned and self.checks.accepts(i, generated, confidence, user, options):
            tokens, report = self._play(user, generated)
        else:
            tokens, report = self._wake(user, options, mark)
            if checked:  # the plan stopped early: say why, for the user
                report = dataclasses.replace(report, refused=self.checks.refused)
        if checked:
            report = dataclasses.replace(report, confidence=checked_confidence)
        out = frame.decode(tokens)
        mark("decode")
        return tokens, out, report

    def _play(self, user: torch.Tensor, generated: torch.Tensor) -> tuple[torch.Tensor, WakeReport]:
        """A planned frame played as predicted, with no backbone run; it enters history at the
        next wake. The output frame is assembled as the delay lines assemble it: streams
        without delay from the previous frame's generated tokens, delayed ones from this one's."""
        generated = generated.clone()  # graph outputs: the next replay overwrites them
        if self._consumed:
            # The user's codebooks whose target is the frame before's codes are the last played
            # frame's, as the microphone gave them (the plan's first frame had them as known
            # targets; the depformer does not predict them: Wakes._planned_steps).
            codes = generated[self._user_first:]
            codes.copy_(torch.where(self._user_trailing, self._consumed[-1].user, codes))
        self._next += 1
        self._consumed.append(LMInputs(user.clone(), generated=generated))
        tokens = torch.where(self._undelayed, self._previous, generated)
        self._previous = generated
        return tokens, WakeReport(woke=False, discarded=0)

    def _wake(self, user: torch.Tensor, options: RuntimeOptions, mark: Callable[[str], None]
              ) -> tuple[torch.Tensor, WakeReport]:
        """The backbone wakes: the frames played since the last wake caught up, the current one,
        and (not under `ar`) K future positions, the new plan."""
        frames = [*self._consumed, LMInputs(user)]
        discarded = 0 if options.policy == "ar" else self._planned - self._next  # AR: not a revision
        k = 0 if options.policy == "ar" else self.block(options)
        # A graph's output: copied, since the decode graph replays before the session reads it.
        tokens = self.wakes.wake(frames, self.predictor if k else None, k, mark).clone()
        if k:
            text, confidence = self.wakes.planned_text()
            self._text[:k].copy_(text, non_blocking=True)
            self._text_confidence[:k].copy_(confidence, non_blocking=True)
        self._planned, self._next, self._consumed = k, 0, []
        self._previous = self.frame.last_generated().clone()
        return tokens, WakeReport(woke=True, discarded=discarded)


def prepare_wakes(wakes: Wakes, predictor: Predictor, pcm: torch.Tensor, options: RuntimeOptions) -> None:
    """Run a predicting loop's frames on `pcm` until each shape they take with the K that
    `options` ask of this predictor has run eagerly and, with graph replay, been captured: the
    wakes over 0..K frames caught up, every planned frame's depformer, the decode of a played
    frame. Output must have started (the plain frame prepared first); the caller resets the
    state afterwards."""
    script = PlayFirst()
    loop = DiffuPlexLoop(wakes, predictor, script)
    options = options.replace(policy="speak")  # the shapes are K's: every predicting policy takes the same
    k = loop.block(options)
    for accept in range(k + 1):
        # Rounds of `accept` frames played, then a wake catching them up: the first round runs
        # each stage eagerly, the next captures it. At most what is left of the last plan
        # comes before them.
        script.accept = accept
        keys = [PLAY_KEY, *wake_keys(accept, k), *map(planned_key, range(accept))]
        wakes.frame.runner.prepare_through(lambda: loop.step(pcm, options, no_mark), keys, 3 * (k + 1))


def prepare_switches(wakes: Wakes, predictor: Predictor, pcm: torch.Tensor, options: RuntimeOptions) -> None:
    """As prepare_wakes, for the wakes that follow a switch of K or to AR mid-plan: n frames
    played from a plan of the predictor's whole block, then a wake under a K below n (0: the
    AR frame that catches them up) takes shape `wake_keys(n, k)`, one prepare_wakes never
    meets."""
    script = PlayFirst()
    loop = DiffuPlexLoop(wakes, predictor, script)
    block = predictor.spec.block
    speak = options.replace(policy="speak", block=block)
    for n in range(1, block + 1):
        for k in range(n):
            after = speak.replace(block=k) if k else speak.replace(policy="ar")

            def step(after: RuntimeOptions = after) -> None:  # the whole plan until n are played, then the switch
                loop.step(pcm, after if len(loop._consumed) == script.accept else speak, no_mark)

            script.accept = n
            wakes.frame.runner.prepare_through(step, wake_keys(n, k), 4 * (block + 2))
