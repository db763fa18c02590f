"""A streaming conversation with a duplex model: 80 ms of microphone audio in, 80 ms of model
speech (and its text) out, with per-stage timings and the figures a live panel shows.

The session is the engine's one API for the app and the command line. It owns the options
(checked against what this machine can honour, applied between frames), the sampling
generator, the prompts (PersonaPlex voice and role) and the conversation's frame runner,
which owns the state and how a frame runs. `reset()` starts a new conversation without
reloading weights and matches a fresh session with the same seed. Inside an AR frame nothing
waits for the device except the final copy of the output to the host (DiffuPlex frames also
read their policy checks).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .diffuplex import DiffuPlexLoop
from .diffuplex_stats import WakeReport
from .lm.personaplex import DEFAULT_ROLE, wrap_role
from .lm.predictor import Predictor, load_predictor
from .lm.sampling import SamplingParams
from .model import DuplexModel
from .options import RuntimeOptions
from .prompts import replay_prompts
from .runtime.placement import new_store, placement_for, toggle_reasons
from .runtime.runner import FrameRunner
from .runtime.timing import FrameTimer, SpeakMeter
from .state import Store

log = logging.getLogger(__name__)



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
    speak_s: tuple[float, ...] = ()
    """SPEAK time of each second of speech this frame completed (usually none, at most one)."""
    state_bytes: int = 0
    """Memory the conversation's streaming state holds after this frame."""
    gpu_memory_bytes: int | None = None
    """Device memory in use after this frame (torch's plus state mapped outside it); None on CPU."""
    diffuplex: WakeReport | None = None
    """What DiffuPlex did this frame (woke, or played a predicted frame); None when it did not run."""


@dataclasses.dataclass(frozen=True)
class Persona:
    """PersonaPlex prompts: a voice prompt name (see DuplexSession.voices) and a text role."""
    voice: str | None = None
    role: str = ""


def _wake_for(predictor: Predictor | None) -> int:
    """Frames one backbone wake covers: up to K played ones caught up, the current, K ahead."""
    return 1 if predictor is None else 2 * predictor.spec.block + 1


def _sampling(o: RuntimeOptions) -> tuple[SamplingParams, SamplingParams]:
    return (SamplingParams(o.text_temperature, o.text_top_k, o.greedy),
            SamplingParams(o.audio_temperature, o.audio_top_k, o.greedy))


class DuplexSession:
    def __init__(self, model: DuplexModel, options: RuntimeOptions | None = None,
                 persona: Persona | None = None, predictor: str | Path | None = None):
        """`predictor`: a DiffuPlex adapter file for the LISTEN and SPEAK policies (see
        load_predictor)."""
        self.model = model
        self.device = model.device
        self.generator = torch.Generator(device=self.device)
        self.predictor: Predictor | None = None
        """The DiffuPlex predictor loaded (in use from the next reset: see load_predictor)."""
        self.load_predictor(predictor)
        self.options = self._checked(options or RuntimeOptions())
        self._pending: RuntimeOptions | None = None  # the options mailbox, any thread -> next frame
        self._pending_lock = threading.Lock()
        self._set_persona(persona)
        self._loop: DiffuPlexLoop | None = None
        self._wake = _wake_for(self.predictor)  # the most frames one wake covers: the state's size
        store = new_store(model.regions(self._wake), self.device, self.options)
        self.runner = FrameRunner(model.lm, model.mimi, store, self.generator, _sampling(self.options))
        self.runner.configure(replay=self.options.graph_replay)
        cuda = self.device.type == "cuda"
        self.timer = FrameTimer(self.device)
        """Times each frame's stages (a profiler may attach to it: engine.bench.kernels)."""
        self._pcm_in = torch.empty(model.frame_size, dtype=torch.float32, pin_memory=cuda)
        self._pcm_out = torch.empty(model.frame_size, dtype=torch.float32, pin_memory=cuda)
        self._tokens_out = torch.empty(1 + model.cfg.dep_q, dtype=torch.int64, pin_memory=cuda)
        self.reset()

    # --- what the app shows ----------------------------------------------------------------

    def capabilities(self) -> dict[str, str | None]:
        """Every option value that could be asked for: None if honoured here, else why not."""
        if not self.model.is_personaplex:
            diffuplex = (f"DiffuPlex needs a model that predicts the user's stream (the PersonaPlex shape); "
                         f"{self.model.name} does not")
        elif self.predictor is None:
            diffuplex = "no DiffuPlex predictor loaded (an adapter file made for this model)"
        else:
            diffuplex = None
        return {**toggle_reasons(self.device), "policy.ar": None, "policy.listen": diffuplex,
                "policy.speak": diffuplex}

    def load_predictor(self, path: str | Path | None) -> None:
        """A DiffuPlex predictor (adapter file) for the LISTEN and SPEAK policies, or None to
        unload it; checked now (a file for another model raises CheckpointError naming it),
        used from the next reset() (the state is sized for its wakes)."""
        if path is None:
            self.predictor = None
            return
        self.predictor = load_predictor(path, self.model.cfg, self.device, self.model.lm.dtype)

    @property
    def voices(self) -> list[str]:
        """PersonaPlex voice prompt names; empty for other models."""
        return sorted(self.model.voices)

    @property
    def default_role(self) -> str:
        """The role prompt used when the user gives none ("" for models without prompts)."""
        return DEFAULT_ROLE if self.model.is_personaplex else ""

    @property
    def diffuplex(self) -> DiffuPlexLoop | None:
        """The DiffuPlex loop of this conversation (None without a predictor)."""
        return self._loop

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
        if options.weights is None:
            options = options.replace(weights=self.model.weights)
        if options.weights != self.model.weights:
            raise ValueError(f"weights are chosen when the model loads: {self.model.name} is loaded with "
                             f"{self.model.weights} weights, not {options.weights}; load it again to change")
        reasons = self.capabilities()
        reason = reasons[f"policy.{options.policy}"]
        if reason is not None:
            raise ValueError(f"policy {options.policy!r} is not available: {reason}")
        for toggle in ("graph_replay", "demand_sized_state"):
            if getattr(options, toggle) and reasons[toggle] is not None:
                log.info("%s requested: %s", toggle, reasons[toggle])
        return options

    def _apply_pending(self) -> None:
        with self._pending_lock:
            new, self._pending = self._pending, None
        if new is None:
            return
        if placement_for(self.device, new) is not type(self.store):
            self.runner.move_state(new_store(self.model.regions(self._wake), self.device, new))
        self.runner.configure(replay=new.graph_replay, sampling=_sampling(new))
        self.options = new

    def close(self) -> None:
        """Give back what lives outside Python's reach: the graphs, then the memory mapped
        for demand-sized state."""
        self.runner.close()

    # --- conversation ------------------------------------------------------------------------

    def _set_persona(self, persona: Persona | None) -> None:
        """Check the persona and prepare its prompts now, so a bad voice fails here."""
        model = self.model
        if not model.is_personaplex:
            if persona is not None and (persona.voice or persona.role):
                raise ValueError(f"{model.name} takes no voice or role prompt (only PersonaPlex does)")
            self.persona, self._voice, self._role_tokens = Persona(), None, []
            return
        if persona is None:
            persona = Persona(next(iter(self.voices), None), DEFAULT_ROLE)
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
        self._size_for(self.predictor)
        if self._loop is None and self.options.policy != "ar":
            log.warning("policy %s without a predictor: AR", self.options.policy)
            self.options = self.options.replace(policy="ar")
        self.runner.reset()
        self.generator.manual_seed(self.options.seed)
        self.meter = SpeakMeter(self.model.frame_size, self.model.sample_rate)
        if self.model.is_personaplex:
            with torch.no_grad():
                return replay_prompts(self.runner, self._voice, self._role_tokens, cancelled)
        return True

    def _size_for(self, predictor: Predictor | None) -> None:
        """State sized for the predictor's wakes (catch-up of up to K frames, the current one,
        K future), and the loop that runs them; a new store when the size changes."""
        wake = _wake_for(predictor)
        if wake != self._wake:
            self._wake = wake
            self.runner.replace_store(new_store(self.model.regions(wake), self.device, self.options))
        self._loop = None if predictor is None else DiffuPlexLoop(self.runner, predictor)

    @torch.no_grad()
    def step(self, pcm: np.ndarray) -> FrameOutput:
        """pcm float32 [frame_size] of microphone audio -> this frame's output."""
        model = self.model
        pcm = np.asarray(pcm)
        if pcm.shape != (model.frame_size,) or not np.issubdtype(pcm.dtype, np.floating):
            raise ValueError(f"a frame is float32 [{model.frame_size}], got {pcm.dtype} {list(pcm.shape)}")
        self._apply_pending()
        self.timer.begin()
        self._pcm_in.copy_(torch.from_numpy(pcm.astype(np.float32, copy=False)))
        loop = self._loop
        report = None
        if self.options.policy != "ar" and loop is None:
            raise RuntimeError(f"policy {self.options.policy}: the predictor is used from the next reset()")
        if loop is not None and self.runner.started and (self.options.policy != "ar" or loop.pending):
            tokens, out, report = loop.step(self._pcm_in, self.options, self.timer.mark)
        else:
            if loop is not None:
                loop.reset()  # AR frames: whatever was planned is no longer the future
            tokens, out = self.runner.frame(self._pcm_in, self.timer.mark)
        if tokens is not None:
            self._pcm_out.copy_(out.view(-1), non_blocking=True)
            self._tokens_out.copy_(tokens, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the frame's one wait for the device
        timings = self.timer.end()
        if tokens is None:
            pcm_out, tokens_out, text = np.zeros(model.frame_size, np.float32), None, ""
        else:
            pcm_out, tokens_out = self._pcm_out.numpy().copy(), self._tokens_out.numpy().copy()
            text = model.text_piece(int(tokens_out[0]))
        return FrameOutput(pcm_out, text, tokens_out, timings, tuple(self.meter.add(timings["total"])),
                           self.state_bytes(), self.gpu_memory_bytes(), report)
