"""A streaming conversation with a duplex model of any family: 80 ms of microphone audio in, 80 ms
of model speech (and its text) out, with per-stage timings and the figures a live panel shows.

The engine's one API for the app and the command line. Its audio is the app's: 24 kHz, in periods of
80 ms (engine.period), whatever the family hears and speaks. It owns what every family shares: the
options (checked against what this machine can honour, applied between steps), the sampling
generator, the step timer and SPEAK meter, the host buffers, the conversion of the period's audio to
the family's rates and step (buffered in, queued out), and the `FrameOutput`. The family's
conversation (engine.families.protocol.FamilyConversation, registered by the family) owns the stage
runner, the state, the prompts and how a step runs. `reset()` starts a new conversation without
reloading weights and matches a fresh session with the same seed. In a plain step only the output's
final copy to the host waits for the device (a predicting policy's steps also read their checks).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .families import conversation_for
from .families.protocol import DuplexModel, FamilyConversation
from .files.finite import REPLACEMENT
from .options import TOGGLES, RuntimeOptions, toggle_reasons
from .period import FRAME_SECONDS, FRAME_SIZE, SAMPLE_RATE
from .runtime.stages import Regeneration
from .runtime.step_audio import StepAudio
from .runtime.timing import FrameTimer, SpeakMeter
from .runtime.waiting import wait_for
from .state import Store

__all__ = ["DuplexSession", "FrameOutput", "Preparing"]
log = logging.getLogger(__name__)
PREPARE_SHARE, PREPARE_LIMIT = 0.5, 0.9
"""A frame (its own work and the recording of a change's graphs after it) ends within the
first share of the cadence; to record one graph that does not fit there, within the second."""
SPARE_SHARE = 0.8  # a step's spare-time work ends by then: the next step waits for its audio anyway


@dataclasses.dataclass
class FrameOutput:
    pcm: np.ndarray
    """float32 [FRAME_SIZE] at SAMPLE_RATE: the model's speech for this period (silence if none)."""
    text: str
    """The model's text whose speech starts in this period ("" for none): a step's words are
    spread over the speech it made (engine.runtime.step_audio)."""
    tokens: np.ndarray | None
    """int64 [output_width]: the tokens of the last step in this period, or None when no step
    ran or the model had no output yet (the family says what they are)."""
    timings: dict[str, float]
    """Seconds spent in each of the family's stages in this period's steps, and its "total"."""
    speak_s: tuple[float, ...] = ()
    """SPEAK time of each second of speech this period completed (usually none, at most one)."""
    state_bytes: int = 0
    """Memory the conversation's streaming state holds after this period."""
    gpu_memory_bytes: int | None = None
    """Device memory in use after this period (torch's plus state mapped outside it); None on CPU."""
    report: object | None = None
    """The family's report of this period's last step (e.g. what a predicting policy did), or None."""
    applied: tuple[str, ...] = ()
    """The options (RuntimeOptions field names) that took effect at this period."""
    steps: int = 1
    """The family's steps run in this period (0 while its step's audio is still being buffered)."""
    preparing: Preparing | None = None
    """A change of options being prepared (it takes effect once its graphs are recorded)."""


class Preparing(NamedTuple):
    """A change of options waiting for its graphs, recorded between frames (counted in their
    time) while the conversation goes on under the options in force."""
    fields: tuple[str, ...]
    """The RuntimeOptions fields that change."""
    recorded: int
    total: int


class DuplexSession:
    def __init__(self, model: DuplexModel, options: RuntimeOptions | None = None,
                 persona: object | None = None, predictor: str | Path | None = None,
                 prompt_progress: Callable[[int, int], None] | None = None):
        """`persona`: what the person set, in the family's own type. `predictor`: a predictor
        file for the family's predicting policies (see load_predictor). `prompt_progress(done,
        total)`: told each frame of the family's prompts, at every reset that does not give
        its own."""
        self.model = model
        self.prompt_progress = prompt_progress
        self.device = model.device
        self.generator = torch.Generator(device=self.device)
        options = options or RuntimeOptions()
        self.conversation: FamilyConversation = conversation_for(model)(model, self.generator, options, persona,
                                                                        predictor)
        """The family's side of the conversation (engine.families): its runner, state, step and prompts."""
        self.options = self._checked(options)
        self._pending: RuntimeOptions | None = None  # the options mailbox, any thread -> next frame
        self._pending_lock = threading.Lock()
        self._change: tuple[RuntimeOptions, tuple[str, ...], Regeneration] | None = None
        """Options being prepared: (them, the fields that change, their graphs' regeneration)."""
        self.timer = FrameTimer(self.device, self.conversation.stages)
        self.audio = StepAudio(model.input_rate, model.output_rate, model.step_samples, self.device)
        """The period's audio buffered to the family's step, and the family's audio queued out."""
        self._tokens_out = torch.empty(self.conversation.output_width, dtype=torch.int64,
                                       pin_memory=self.device.type == "cuda")
        self.nonfinite_samples = 0
        """Input samples of this conversation that were NaN or infinite, replaced before the
        model heard them (engine.files.finite); counted since the last reset()."""
        self.reset()

    # --- what the app shows ----------------------------------------------------------------

    def capabilities(self) -> dict[str, str | None]:
        """Every option value that could be asked for: None if honoured here, else why not."""
        return {**toggle_reasons(self.device.type), **self.conversation.capabilities()}

    def load_predictor(self, path: str | Path | None) -> None:
        """A predictor file for the family's predicting policies, or None to unload it; checked
        now (a file for another model raises CheckpointError naming it), used from the next
        reset() (the state is sized for what the policies run)."""
        self.conversation.load_predictor(path)

    @property
    def predictor(self):
        """The predictor loaded, or None."""
        return self.conversation.predictor

    @property
    def stage_words(self) -> dict[str, str]:
        """The family's stages in a person's words (for the window)."""
        return self.conversation.stage_words

    def tally(self):
        """A new tally of the family's step reports (engine.families.protocol.Tally)."""
        return self.conversation.tally()

    @property
    def persona(self) -> object:
        return self.conversation.persona

    @property
    def voices(self) -> list[str]:
        """The voice names a person can choose; empty for a model without voices."""
        return self.conversation.voices

    @property
    def default_role(self) -> str:
        """The role prompt used when the user gives none ("" for models without prompts)."""
        return self.conversation.default_role

    @property
    def prompt_s(self) -> float:
        """Seconds the last reset() spent on the family's prompts (0 without prompts)."""
        return self.conversation.prompt_s

    @property
    def runner(self):
        """The conversation's stage runner (engine.runtime.stages): its state and graphs."""
        return self.conversation.runner

    @property
    def store(self) -> Store:
        return self.runner.store

    def state_bytes(self) -> int:
        """Memory the conversation's streaming state holds now."""
        return self.store.nbytes()

    def gpu_memory_bytes(self) -> int | None:
        """Device memory in use (torch's allocations plus state mapped outside them); None on CPU."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.memory_allocated(self.device) + self.store.mapped_bytes()

    @property
    def speak_times(self) -> list[float]:
        """Engine seconds spent on each completed second of output audio."""
        return self.meter.seconds

    # --- options -----------------------------------------------------------------------------

    def set_options(self, options: RuntimeOptions) -> None:
        """From any thread; applies from the next frame (a new seed at the next reset())."""
        checked = self._checked(options)
        with self._pending_lock:
            self._pending = checked

    def _checked(self, options: RuntimeOptions) -> RuntimeOptions:
        if not isinstance(options, RuntimeOptions):
            raise TypeError(f"options must be RuntimeOptions, got {type(options).__name__}")
        loaded = self.model.weights_option
        if options.weights is None:
            options = options.replace(weights=loaded)
        if options.weights != loaded:
            raise ValueError(f"weights are chosen when the model loads: {self.model.name} is loaded with "
                             f"{self.model.weights} weights, not {options.weights}; load it again to change")
        refusal = self.conversation.refusal(options)
        if refusal is not None:
            raise ValueError(refusal)
        reasons = toggle_reasons(self.device.type)
        for toggle in TOGGLES:
            if getattr(options, toggle) and reasons[toggle] is not None:
                log.info("%s requested: %s", toggle, reasons[toggle])
        return options

    def _apply_pending(self, wait: bool = False) -> tuple[str, ...]:
        """The options set since the last frame, in force from now, unless they need graphs
        the conversation does not have: those are recorded after this and the next frames
        (`_prepare_more`) and the options take effect once they are (at once with `wait`:
        before a conversation). Returns the fields that took effect."""
        with self._pending_lock:
            new, self._pending = self._pending, None
        if new is not None:
            if self._change is not None:  # newer options: prepare for them instead
                self._change[2].cancel()
                self._change = None
            changed = tuple(field.name for field in dataclasses.fields(new)
                            if getattr(new, field.name) != getattr(self.options, field.name))
            regeneration = self.conversation.change(self.options, new)
            if regeneration is None:
                self._set(new)
                return changed
            self._change = new, changed, regeneration
        if self._change is None or not (wait or self._change[2].done):
            return ()
        (new, changed, regeneration), self._change = self._change, None
        self.conversation.configure(new)  # before the swap: it drops the graphs in use
        regeneration.finish()
        self.options = new
        return changed

    def _set(self, options: RuntimeOptions) -> None:
        self.conversation.configure(options)
        self.options = options

    def _prepare_more(self, began: float) -> Preparing | None:
        """Record some of a pending change's graphs, within the frame's share of the cadence."""
        if self._change is None:
            return None
        new, changed, regeneration = self._change
        regeneration.step(began + PREPARE_SHARE * FRAME_SECONDS, began + PREPARE_LIMIT * FRAME_SECONDS)
        return Preparing(changed, regeneration.total - len(regeneration.todo), regeneration.total)

    def close(self) -> None:
        """Give back what lives outside Python's reach: the graphs, then the memory mapped
        for demand-sized state."""
        if self._change is not None:
            self._change[2].cancel()
            self._change = None
        self._log_replaced()
        self.runner.close()

    def _log_replaced(self) -> None:
        if self.nonfinite_samples:
            log.info("%d non-finite input samples replaced in this conversation (%s)",
                     self.nonfinite_samples, REPLACEMENT)

    # --- conversation ------------------------------------------------------------------------

    def prepare(self) -> None:
        """Do before the conversation what its first frames would otherwise stall on: kernel
        compilation and graph capture, which only a GPU has (the app and `offline` call it on
        CUDA), for the plain frame and, with a predictor, whatever its policies run. The
        conversation starts afresh afterwards: the output is what it would have been. Options
        set later that need other graphs get them between frames (see `_apply_pending`)."""
        self._apply_pending(wait=True)  # prepare for the options the conversation will run under
        silence = self.audio.step_buffer()
        silence.zero_()
        # With graphs even when replay is off, so that turning it on takes effect at once.
        replayed = self.options.replace(graph_replay=True)
        self.conversation.configure(replayed)
        self.conversation.prepare(silence, replayed)
        self.conversation.configure(self.options)
        self.reset()

    def check_persona(self, persona: object) -> None:
        """Raise (one line) unless this model takes `persona`, its prompts take at most half
        the model's context and its voice prompt reads; before a reset with it, which would
        play them (a long role takes minutes)."""
        self.conversation.check_persona(persona)

    def reset(self, persona: object | None = None, cancelled: Callable[[], bool] = lambda: False,
              progress: Callable[[int, int], None] | None = None) -> bool:
        """Start a new conversation (optionally with a new persona); weights stay loaded.
        The family plays its prompts here; `cancelled()` is checked every prompt frame and
        returns False if it stopped the replay (reset again before stepping); `progress(done,
        total)` is told every prompt frame (default: prompt_progress)."""
        if persona is not None:
            self.conversation.set_persona(persona)
        self._apply_pending(wait=True)
        self._log_replaced()
        self.nonfinite_samples = 0
        self.generator.manual_seed(self.options.seed)
        self.meter = SpeakMeter()
        self.audio.reset()
        self.options, done = self.conversation.reset(self.options, cancelled, progress or self.prompt_progress)
        return done

    @property
    def can_interrupt(self) -> bool:
        """Whether talking over the model should cut its speech short (its family says)."""
        return self.conversation.interruptible

    def interrupt(self) -> float:
        """The user spoke over the model: its family ends the model's turn at its next step and
        the speech queued here is dropped, with its words; returns the seconds dropped. Only where
        `can_interrupt`."""
        self.conversation.interrupt()
        return self.audio.drop_speech() / SAMPLE_RATE

    @torch.no_grad()
    def step(self, pcm: np.ndarray) -> FrameOutput:
        """pcm [FRAME_SIZE] of microphone audio at SAMPLE_RATE -> this period's output. The
        family's steps run as its step's audio completes: none in some periods of a long step,
        one in each period when its step is the period."""
        pcm = np.asarray(pcm)
        if pcm.shape != (FRAME_SIZE,) or not np.issubdtype(pcm.dtype, np.floating):
            raise ValueError(f"a frame is float32 [{FRAME_SIZE}], got {pcm.dtype} {list(pcm.shape)}")
        self.timer.begin()  # a change's cost (a state move) counts to the period it delays
        applied = self._apply_pending()
        self.timer.mark(None)
        # Every path's microphone audio enters here (the app's and offline's), so here alone
        # a NaN is kept from reaching the model's state, where it would stay.
        replaced = self.audio.take(pcm)
        if replaced and not self.nonfinite_samples:
            log.info("%d non-finite input samples replaced (%s); later ones are counted",
                     replaced, REPLACEMENT)
        self.nonfinite_samples += replaced
        steps, tokens_out, report = 0, None, None
        while (pcm_in := self.audio.next_step()) is not None:
            tokens, out, report = self.conversation.step(pcm_in, self.options, self.timer.mark)
            self.audio.queue(out)
            if tokens is not None:
                self._tokens_out.copy_(tokens, non_blocking=True)
            wait_for(self.device)  # the step's one wait for the device
            text = ""
            if tokens is not None:
                tokens_out = self._tokens_out.numpy().copy()
                text = self.conversation.text(tokens_out)
            self.audio.queued(text)
            steps += 1
        preparing = self._prepare_more(self.timer.started)
        timings = self.timer.end()  # its total: the period and what was recorded after it
        if steps:  # what the step left of its cadence: for work later steps would stall on
            self.conversation.spare(self.timer.started + SPARE_SHARE * self.audio.step_samples / self.audio.input_rate)
        return FrameOutput(self.audio.period_out(), self.audio.period_text(), tokens_out, timings,
                           tuple(self.meter.add(timings["total"])), self.state_bytes(), self.gpu_memory_bytes(),
                           report, applied, steps, preparing)
