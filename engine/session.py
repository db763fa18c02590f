"""A streaming conversation with a duplex model: 80 ms of microphone audio in, 80 ms of model
speech (and its text) out, with per-stage timings.

The session owns the conversation's one StateStore (every region the LM and Mimi declare),
the sampling generator, and the prompts (PersonaPlex voice and role), so `reset()` starts a
new conversation without reloading weights and matches a fresh session with the same seed.
Inside a frame nothing waits for the device except the final copy of the output to the host.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import time
from typing import Callable

import numpy as np
import torch

from .lm.generate import LMStepper
from .lm.loader import DuplexModel
from .lm.personaplex import DEFAULT_ROLE, replay_prompts, wrap_role
from .lm.sampling import SamplingParams
from .options import RuntimeOptions
from .runtime.graphs import StageGraphs
from .runtime.placement import DemandStore
from .state import StateStore, copy_state

log = logging.getLogger(__name__)

STAGES = ("encode", "backbone", "depformer", "decode")

# Why an option cannot be used; None where it can. Toggles that do not apply are still
# accepted (the output is the same either way) and logged.
_CPU_REASONS = {
    "graph_replay": "CUDA graph replay needs a CUDA GPU",
    "demand_sized_state": "demand-sized state needs CUDA virtual memory (on the CPU it runs as "
                          "an accounting emulation that saves no memory)",
}
_POLICY_REASONS = {
    "policy.listen": "the DiffuPlex LISTEN policy is not implemented yet",
    "policy.speak": "the DiffuPlex SPEAK policy is not implemented yet",
}


def _has_cuda_bindings() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:  # no `cuda` namespace package at all
        return False


@dataclasses.dataclass
class FrameOutput:
    pcm: np.ndarray
    """float32 [frame_size]: the model's speech for this frame (silence during start-up)."""
    text: str
    """The text piece the model emitted this frame ("" for padding or start-up)."""
    tokens: np.ndarray | None
    """int64 [1 + dep_q]: text token then codebooks, or None during start-up (as the reference)."""
    timings: dict[str, float]
    """Seconds spent in encode, backbone, depformer, decode, and total."""


@dataclasses.dataclass(frozen=True)
class Persona:
    """PersonaPlex prompts: a voice prompt name (see DuplexModel.voices) and a text role."""
    voice: str | None = None
    role: str = ""


class SpeakMeter:
    """Engine time spent per second of output audio: frames are cut at second boundaries
    (12.5 frames a second), a straddling frame's time split by its samples on each side."""

    def __init__(self, frame_size: int, sample_rate: int):
        self.frame_size, self.sample_rate = frame_size, sample_rate
        self.seconds: list[float] = []
        self._spent, self._filled = 0.0, 0

    def add(self, seconds: float) -> None:
        left, samples = seconds, self.frame_size
        while self._filled + samples >= self.sample_rate:
            take = self.sample_rate - self._filled
            share = left * take / samples
            self.seconds.append(self._spent + share)
            self._spent, self._filled = 0.0, 0
            left, samples = left - share, samples - take
        self._spent += left
        self._filled += samples


class _Timer:
    """Stage marks: perf_counter on CPU; CUDA events (read after the frame's one sync) on GPU.
    The total is host wall time from the frame's start to its output on the host."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object]] = []
        self.start = time.perf_counter()

    def mark(self, stage: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((stage, event))
        else:
            self.marks.append((stage, time.perf_counter()))

    def seconds(self) -> dict[str, float]:
        """Call after the frame's sync."""
        out = dict.fromkeys(STAGES, 0.0)
        for (_, a), (stage, b) in zip(self.marks, self.marks[1:]):
            out[stage] = a.elapsed_time(b) / 1000 if self.cuda else b - a
        out["total"] = time.perf_counter() - self.start
        return out


class DuplexSession:
    def __init__(self, model: DuplexModel, options: RuntimeOptions = RuntimeOptions(),
                 persona: Persona | None = None):
        self.model = model
        self.device = model.device
        self.generator = torch.Generator(device=self.device)
        self.options = self._checked(options)
        self.store = self._new_store(self.options)
        self._pending: RuntimeOptions | None = None
        self._set_persona(persona)
        self.stepper = LMStepper(model.lm, self.store, *self._sampling(self.options), self.generator)
        cuda = self.device.type == "cuda"
        self._pcm_in = torch.empty(model.frame_size, dtype=torch.float32, pin_memory=cuda)
        self._pcm_out = torch.empty(model.frame_size, dtype=torch.float32, pin_memory=cuda)
        self._tokens_out = torch.empty(1 + model.cfg.dep_q, dtype=torch.int64, pin_memory=cuda)
        # Graph replay reads its input from one device buffer at a fixed address.
        self._pcm_dev = torch.zeros(1, 1, model.frame_size, dtype=torch.float32, device=self.device)
        self.graphs = StageGraphs(self.device, self.generator) if cuda else None
        self._warm = False  # a steady frame ran eagerly: lazy initialisation is done, capture is safe
        self.reset()

    # --- options -------------------------------------------------------------------------

    def capabilities(self) -> dict[str, str | None]:
        """Every option value that could be asked for: None if honoured, else why not."""
        cuda = self.device.type == "cuda"
        toggles = {name: None if cuda else reason for name, reason in _CPU_REASONS.items()}
        if cuda and not _has_cuda_bindings():
            toggles["demand_sized_state"] = ("demand-sized state needs the cuda-bindings package "
                                             "(pip install 'duplexcadence[gpu]')")
        return {**toggles, "policy.ar": None, **_POLICY_REASONS}

    def set_options(self, options: RuntimeOptions) -> None:
        """Applies from the next frame; a new seed takes effect at the next reset()."""
        self._pending = self._checked(options)

    def _checked(self, options: RuntimeOptions) -> RuntimeOptions:
        if not isinstance(options, RuntimeOptions):
            raise TypeError(f"options must be RuntimeOptions, got {type(options).__name__}")
        reason = self.capabilities()[f"policy.{options.policy}"]
        if reason is not None:
            raise ValueError(f"policy {options.policy!r} is not available: {reason}")
        for toggle in ("graph_replay", "demand_sized_state"):
            reason = self.capabilities()[toggle]
            if getattr(options, toggle) and reason is not None:
                log.info("%s requested: %s", toggle, reason)
        return options

    def _new_store(self, options: RuntimeOptions):
        usable = self.device.type != "cuda" or self.capabilities()["demand_sized_state"] is None
        placement = DemandStore if options.demand_sized_state and usable else StateStore
        return placement(self.model.regions(), self.device)

    def close(self) -> None:
        """Give back what lives outside Python's reach: the graphs, then the memory mapped
        for demand-sized state (graphs may point into it, so explicit and in that order)."""
        if self.graphs is not None:
            self.graphs.clear()
        if isinstance(self.store, DemandStore):
            self.store.close()

    def state_bytes(self) -> int:
        """Memory the conversation's streaming state holds now."""
        return self.store.nbytes()

    def gpu_memory_bytes(self) -> int | None:
        """Device memory in use (torch's allocations plus state mapped outside them); None on CPU."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.memory_allocated(self.device) + self.store.mapped_bytes()

    @staticmethod
    def _sampling(o: RuntimeOptions) -> tuple[SamplingParams, SamplingParams]:
        return (SamplingParams(o.text_temperature, o.text_top_k, o.greedy),
                SamplingParams(o.audio_temperature, o.audio_top_k, o.greedy))

    def _apply_pending(self) -> None:
        if self._pending is None:
            return
        old, self.options, self._pending = self.options, self._pending, None
        self.stepper.text, self.stepper.audio = self._sampling(self.options)
        if old.demand_sized_state != self.options.demand_sized_state:
            self._move_state()
        elif self._sampling(old) != self._sampling(self.options) and self.graphs is not None:
            self.graphs.clear()  # sampling parameters are baked into the captured graphs

    def _move_state(self) -> None:
        """Switch placement mid-conversation: the state moves, so captured graphs go."""
        new = self._new_store(self.options)
        copy_state(self.store, new)
        if isinstance(self.store, DemandStore):
            self.store.close()
        self.store = self.stepper.store = new
        if self.graphs is not None:
            self.graphs.clear()

    # --- conversation --------------------------------------------------------------------

    def _set_persona(self, persona: Persona | None) -> None:
        """Check the persona and prepare its prompts now, so a bad voice fails here."""
        model = self.model
        if not model.is_personaplex:
            if persona is not None and (persona.voice or persona.role):
                raise ValueError(f"{model.name} takes no voice or role prompt (only PersonaPlex does)")
            self.persona, self._voice, self._role_tokens = Persona(), None, []
            return
        if persona is None:
            persona = Persona(next(iter(sorted(model.voices)), None), DEFAULT_ROLE)
        self._voice = model.load_voice(persona.voice) if persona.voice is not None else None
        self._role_tokens = model.tokenizer.encode(wrap_role(persona.role)) if persona.role.strip() else []
        self.persona = persona

    def reset(self, persona: Persona | None = None, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Start a new conversation (optionally with a new persona); weights stay loaded.
        PersonaPlex replays its prompts here; `cancelled()` is checked every prompt frame and
        returns False if it stopped the replay (reset again before stepping)."""
        if persona is not None:
            self._set_persona(persona)
        self._apply_pending()
        self.store.reset()
        self.stepper.reset()
        self.generator.manual_seed(self.options.seed)
        self.meter = SpeakMeter(self.model.frame_size, self.model.sample_rate)
        if self.model.is_personaplex:
            with torch.no_grad():
                return replay_prompts(self.stepper, self._voice, self._role_tokens, cancelled)
        return True

    @property
    def speak_times(self) -> list[float]:
        """Engine seconds spent on each completed second of output audio."""
        return self.meter.seconds

    @torch.no_grad()
    def step(self, pcm: np.ndarray) -> FrameOutput:
        """pcm float32 [frame_size] of microphone audio -> this frame's output."""
        model = self.model
        pcm = np.asarray(pcm)
        if pcm.shape != (model.frame_size,) or not np.issubdtype(pcm.dtype, np.floating):
            raise ValueError(f"a frame is float32 [{model.frame_size}], got {pcm.dtype} {list(pcm.shape)}")
        self._apply_pending()
        timer = _Timer(self.device)
        timer.mark("start")
        self._pcm_in.copy_(torch.from_numpy(pcm.astype(np.float32, copy=False)))
        self._pcm_dev.view(-1).copy_(self._pcm_in, non_blocking=True)
        self.store.advance("mimi_step", model.mimi.cfg.resample_stride)
        if self._replaying():
            return self._replayed_step(timer)
        store = self.store
        codes = model.mimi.encode_step(self._pcm_dev, store)
        timer.mark("encode")
        tokens = self.stepper.step(codes[0, :model.cfg.user_q, 0], mark=timer.mark)
        if tokens is None:
            self._sync()
            return self._finish(np.zeros(model.frame_size, np.float32), None, timer)
        q = model.cfg.model_q
        out = model.mimi.decode_step(tokens[1:1 + q].view(1, q, 1), store)
        timer.mark("decode")
        self._warm = True
        return self._output(out, tokens, timer)

    def _replaying(self) -> bool:
        return (self.options.graph_replay and self.graphs is not None and self._warm
                and self.stepper.started and self.stepper.inputs is None)

    def _replayed_step(self, timer: _Timer) -> FrameOutput:
        """The steady frame as four replayed graphs (one per stage, so stages stay timed).
        Host bookkeeping (clocks, frame count) happens here, outside the graphs."""
        model, stepper, graphs = self.model, self.stepper, self.graphs
        q = model.cfg.model_q
        codes = graphs.run("encode", lambda: model.mimi.encode_step(self._pcm_dev, self.store))
        timer.mark("encode")
        self.store.advance("frame")
        frame = graphs.run("backbone", lambda: stepper.backbone(codes[0, :model.cfg.user_q, 0]))
        timer.mark("backbone")
        tokens = graphs.run("depformer", lambda: stepper.depformer(*frame))
        timer.mark("depformer")
        stepper.frames += 1
        out = graphs.run("decode", lambda: model.mimi.decode_step(tokens[1:1 + q].view(1, q, 1), self.store))
        timer.mark("decode")
        return self._output(out, tokens, timer)

    def _output(self, pcm: torch.Tensor, tokens: torch.Tensor, timer: _Timer) -> FrameOutput:
        self._pcm_out.copy_(pcm.view(-1), non_blocking=True)
        self._tokens_out.copy_(tokens, non_blocking=True)
        self._sync()  # the frame's one wait for the device
        return self._finish(self._pcm_out.numpy().copy(), self._tokens_out.numpy().copy(), timer)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    def _finish(self, pcm: np.ndarray, tokens: np.ndarray | None, timer: _Timer) -> FrameOutput:
        text = "" if tokens is None else self.model.text_piece(int(tokens[0]))
        frame = FrameOutput(pcm, text, tokens, timer.seconds())
        self.meter.add(frame.timings["total"])
        return frame
