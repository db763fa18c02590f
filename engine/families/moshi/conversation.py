"""A conversation with a Moshi-family model: what the session asks of a family.

It owns the conversation's stage runner (its state sized for the wakes), the Moshi frame, PersonaPlex's
persona and prompts, and, with a DiffuPlex predictor, the wakes and the loop that plays
predicted frames. The session (engine.session) keeps what every family shares: the options
mailbox, timing, the host buffers and what a frame reports.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ...options import RuntimeOptions
from ...persona import Persona
from ...runtime.stages import Regeneration, StageRunner
from ...state.placement import new_store, placement_for
from .diffuplex.loop import DiffuPlexLoop, prepare_switches, prepare_wakes
from .diffuplex.predictor import Predictor, load_predictor
from .diffuplex.stats import DiffuPlexStats, WakeReport
from .diffuplex.wake import Wakes
from .frame import FRAME_KEYS, STAGE_WORDS, MoshiFrame, is_prompt_key, sampling_of
from .lm.personaplex import DEFAULT_ROLE, check_prompt_length, wrap_role
from .model import MoshiModel
from .prompts import replay_prompts

log = logging.getLogger(__name__)


def _wake_for(predictor: Predictor | None) -> int:
    """Frames one backbone wake covers: up to K played ones caught up, the current, K ahead."""
    return 1 if predictor is None else 2 * predictor.spec.block + 1


class MoshiConversation:
    """engine.families.protocol.FamilyConversation for Moshi and PersonaPlex."""

    stages = FRAME_KEYS
    stage_words = STAGE_WORDS

    def __init__(self, model: MoshiModel, generator: torch.Generator, options: RuntimeOptions,
                 persona: Persona | None, predictor: str | Path | None):
        self.model = model
        self.predictor: Predictor | None = None
        """The DiffuPlex predictor loaded (in use from the next reset: see load_predictor)."""
        self.load_predictor(predictor)
        self.set_persona(persona)
        self._wake = _wake_for(self.predictor)  # the most frames one wake covers: the state's size
        self.runner = StageRunner(new_store(self.regions(), model.device, options), model.device, generator,
                                  options)
        self.frame = MoshiFrame(self.runner, model.lm, model.mimi, options)
        self._wakes: Wakes | None = None
        self.diffuplex: DiffuPlexLoop | None = None
        """The DiffuPlex loop of this conversation (None without a predictor)."""
        self.prompt_s = 0.0
        """Seconds the last reset spent replaying PersonaPlex's prompts (0 without prompts)."""

    @property
    def output_width(self) -> int:
        """Tokens a frame outputs: the text token and the depformer's codebooks."""
        return 1 + self.model.cfg.dep_q

    def regions(self) -> list:
        """The state this conversation declares, sized for its wakes."""
        return self.model.regions(self._wake)

    def capabilities(self) -> dict[str, str | None]:
        """Each policy: None if this conversation can run it, else why not."""
        if not self.model.cfg.predicts_user:
            diffuplex = (f"DiffuPlex needs a model that predicts the user's stream (the PersonaPlex shape); "
                         f"{self.model.name} does not")
        elif self.predictor is None:
            diffuplex = "no DiffuPlex predictor loaded (an adapter file made for this model)"
        else:
            diffuplex = None
        return {"policy.ar": None, "policy.listen": diffuplex, "policy.speak": diffuplex}

    def refusal(self, options: RuntimeOptions) -> str | None:
        reason = self.capabilities()[f"policy.{options.policy}"]
        return None if reason is None else f"policy {options.policy!r} is not available: {reason}"

    def load_predictor(self, path: str | Path | None) -> None:
        """A DiffuPlex predictor (adapter file) for the LISTEN and SPEAK policies, or None to
        unload it; checked now (a file for another model raises CheckpointError naming it),
        used from the next reset() (the state is sized for its wakes)."""
        model = self.model
        self.predictor = None if path is None else load_predictor(path, model.cfg, model.device, model.lm.dtype)

    @property
    def voices(self) -> list[str]:
        return sorted(self.model.voices)

    @property
    def default_role(self) -> str:
        return DEFAULT_ROLE if self.model.variant == "personaplex" else ""

    def set_persona(self, persona: Persona | None) -> None:
        """Check the persona and prepare its prompts now, so a bad voice fails here."""
        if self.model.variant != "personaplex":
            self._prompts(persona)  # refuses prompts this model does not take
            self.persona, self._voice, self._role_tokens = Persona(), None, []
            return
        if persona is None:
            persona = Persona(next(iter(self.voices), None), DEFAULT_ROLE)
        self._voice, self._role_tokens = self._prompts(persona)
        self.persona = persona

    def check_persona(self, persona: Persona) -> None:
        """ValueError in one line unless this model takes `persona` and its prompts take at
        most half its context (lm.personaplex.check_prompt_length); nothing is replayed."""
        voice, role_tokens = self._prompts(persona)
        if self.model.variant == "personaplex":
            check_prompt_length(self.model.cfg, persona.voice, 0 if voice is None else len(voice.embeddings),
                                len(role_tokens))

    def _prompts(self, persona: Persona | None):
        """(voice prompt or None, role tokens) of `persona`, read and checked."""
        model = self.model
        if model.variant != "personaplex":
            if persona is not None and (persona.voice or persona.role):
                raise ValueError(f"{model.name} takes no voice or role prompt (only PersonaPlex does)")
            return None, []
        voice = model.load_voice(persona.voice) if persona.voice is not None else None
        return voice, model.tokenizer.encode(wrap_role(persona.role)) if persona.role.strip() else []

    def configure(self, options: RuntimeOptions) -> None:
        self.runner.configure(options)
        self.frame.configure(options)

    def change(self, old: RuntimeOptions, new: RuntimeOptions) -> Regeneration | None:
        """The graphs a change from `old` to `new` needs before it takes effect (recorded in the
        background: see Regeneration), or None when the graphs in use serve `new`: sampling is
        baked into graphs, another placement of the state moves what they point at, and turning
        replay on needs graphs dropped while it was off. A new placement is made here and the
        state moved into it now, or by the regeneration once its graphs are recorded."""
        runner = self.runner
        store = None
        if placement_for(self.model.device, new) is not type(runner.store):
            store = new_store(self.regions(), self.model.device, new)
        replay = new.graph_replay and runner.can_replay
        if not replay or not (store is not None or sampling_of(old) != sampling_of(new)
                              or (not old.graph_replay and runner.stale(is_prompt_key))):
            if store is not None:
                runner.move_state(store)
            return None
        # The prompts' graphs are not recorded mid-conversation: their next use captures them.
        return runner.regenerate(lambda: self.frame.sampling_as(new), store, skip=is_prompt_key)

    def reset(self, options: RuntimeOptions, cancelled: Callable[[], bool],
              progress: Callable[[int, int], None] | None = None) -> tuple[RuntimeOptions, bool]:
        """A new conversation under `options`: the state sized for the predictor's wakes, zeroed,
        and PersonaPlex's prompts replayed (`cancelled()` checked and `progress(done, total)`
        told every prompt frame). Returns the options in force (a DiffuPlex policy without a
        predictor falls back to AR) and False if the prompts were cancelled."""
        self._size_for(self.predictor, options)
        if self.diffuplex is None and options.policy != "ar":
            log.warning("policy %s without a predictor: AR", options.policy)
            options = options.replace(policy="ar")
        self.frame.reset()
        self.prompt_s = 0.0
        if self.model.variant != "personaplex":
            return options, True
        return options, self._replay_prompts(cancelled, progress)

    def _replay_prompts(self, cancelled: Callable[[], bool], progress: Callable[[int, int], None] | None) -> bool:
        started = time.perf_counter()
        with torch.no_grad():
            done = replay_prompts(self.frame, self._voice, self._role_tokens, cancelled, progress)
        if self.model.device.type == "cuda":  # the prompts' time is the device's: wait for it
            torch.cuda.synchronize(self.model.device)
        self.prompt_s = time.perf_counter() - started
        return done

    def prepare(self, pcm: torch.Tensor, options: RuntimeOptions) -> None:
        """Run frames on `pcm` (silence, in a host or device buffer) until each stage a
        conversation under `options` would meet has run eagerly (Triton compiles its kernels
        then) and, with graph replay, been captured, so that its first frames neither compile
        nor capture; then the state goes back to zero. The plain frame first (output starts
        after the delay lines fill: one eager frame with output, then one that captures); with
        a predictor, whatever the policy and K (both may change mid-conversation), the wakes of
        every K up to its block and those that follow a switch of K or to AR mid-plan, so a
        switch of policy or K never compiles."""
        self._size_for(self.predictor, options)
        frame = self.frame
        with torch.no_grad():
            frame.reset()
            if self.predictor is not None:
                self._wakes.bind(self.predictor)  # now: binding it at the first wake would drop the frame's graphs
            limit = self.model.cfg.max_delay + self.model.lm.lines.lead + 3
            self.runner.prepare_through(lambda: frame.frame(pcm), FRAME_KEYS, limit)
            if self.predictor is not None:
                for k in range(1, self.predictor.spec.block + 1):
                    prepare_wakes(self._wakes, self.predictor, pcm, options.replace(block=k))
                prepare_switches(self._wakes, self.predictor, pcm, options)
            frame.reset()

    def _size_for(self, predictor: Predictor | None, options: RuntimeOptions) -> None:
        """State sized for the predictor's wakes (catch-up of up to K frames, the current one,
        K future), and the loop that runs them; a new store when the size changes."""
        wake = _wake_for(predictor)
        if wake != self._wake:
            self._wake, self._wakes = wake, None
            self.runner.replace_store(new_store(self.regions(), self.model.device, options))
        if predictor is not None and self._wakes is None:
            self._wakes = Wakes(self.frame)  # once per store: captured wakes read its buffers
        self.diffuplex = None if predictor is None else DiffuPlexLoop(self._wakes, predictor)

    def step(self, pcm: torch.Tensor, options: RuntimeOptions, mark: Callable[[str], None]
             ) -> tuple[torch.Tensor | None, torch.Tensor | None, WakeReport | None]:
        """One frame: pcm [frame_size] in a host or device buffer -> (output tokens, pcm on the
        device; None, None during start-up; what DiffuPlex did or None)."""
        loop = self.diffuplex
        if options.policy != "ar" and loop is None:
            raise RuntimeError(f"policy {options.policy}: the predictor is used from the next reset()")
        if loop is not None and self.frame.started and (options.policy != "ar" or loop.pending):
            return loop.step(pcm, options, mark)
        if loop is not None:
            loop.reset()  # AR frames: whatever was planned is no longer the future
        tokens, out = self.frame.frame(pcm, mark)
        return tokens, out, None

    def spare(self, until: float) -> None:
        """Nothing to do between steps: every shape is captured when the conversation starts."""

    def tally(self) -> DiffuPlexStats:
        return DiffuPlexStats()

    interruptible = False  # it hears the person every frame, and stops by itself

    def interrupt(self) -> None:
        raise ValueError("an 80 ms model is never interrupted: it hears the person every frame")

    def text(self, tokens) -> str:
        """The text token's piece (the first of a frame's tokens)."""
        return self.model.text_piece(int(tokens[0]))
