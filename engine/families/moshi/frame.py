"""The Moshi family's frame (Moshi, PersonaPlex): how one 80 ms frame runs, as four stages:

    encode     microphone PCM -> the user's codes                      (Mimi encoder)
    backbone   a wake of the temporal transformer over N positions -> hidden state, text token
    depformer  hidden state -> the frame's audio codebooks              (sampled on the device)
    decode     the model's codebooks -> PCM                             (Mimi decoder)

Each stage is a function of static device buffers and the store, so the generic runner
(engine.runtime.stages) may run it eagerly or replay its graph; a frame's four graphs read one
another's outputs, so a frame replays all four or none. The stages declare their clocks (`mimi_step`
for encode, `frame` for the backbone); the runner ticks them. DiffuPlex (engine.families.diffuplex)
builds its wakes from the same pieces (`frame_rows`, `wake_of`, `run_lm`, `codebooks`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...options import RuntimeOptions
from ...runtime.stages import Stage, StageRunner
from .inputs import LMInputs, Wake
from .lm.moshi_lm import MoshiLM
from .lm.token_sampling import SamplingParams, draw_unused, sample
from .mimi import Mimi
from .mimi_stages import MimiStages

FRAME_KEYS = ("encode", "backbone", "depformer", "decode")
STAGE_WORDS = {"encode": "hearing you", "backbone": "large model", "depformer": "small model (the voice)",
               "decode": "making the sound"}
"""The stages in the window's words."""
LM_KEYS = FRAME_KEYS[1:3]
PLAY_KEY = "play"
"""The decode of a frame whose tokens come from elsewhere (a played prediction)."""


def no_mark(stage: str) -> None:
    pass


def prompt_keys(inputs: LMInputs) -> tuple[tuple, tuple]:
    """The keys of a prompt frame's two stages: one pair for each kind of prompt frame, by
    which inputs it has (a voice frame's embedding, a role frame's tokens)."""
    kind = tuple(x is not None for x in (inputs.user, inputs.model, inputs.text, inputs.embedding))
    return ("prompt", "backbone", kind), ("prompt", "depformer", kind)


def is_prompt_key(key: Any) -> bool:
    return isinstance(key, tuple) and key[0] == "prompt"


def depformer_steps(known: list[bool], dep_q: int) -> int:
    """The depformer steps a frame runs, given which streams' targets are forced (`known`,
    text first): up to the last codebook not known already (step k generates stream k + 1).
    The steps after it are teacher-forced and nothing reads what they would compute."""
    return max((k + 1 for k in range(dep_q) if not known[k + 1]), default=0)


def sampling_of(options: RuntimeOptions) -> tuple[SamplingParams, SamplingParams]:
    """The (text, audio) sampling parameters the options ask for."""
    return (SamplingParams(options.text_temperature, options.text_top_k, options.greedy),
            SamplingParams(options.audio_temperature, options.audio_top_k, options.greedy))


class MoshiFrame:
    """The frames of one conversation with a Moshi-family LM, over `runner`. `mimi` may be None
    to run the LM alone (prompts, reference tests)."""

    def __init__(self, runner: StageRunner, lm: MoshiLM, mimi: Mimi | None, options: RuntimeOptions):
        self.runner, self.lm, self.cfg = runner, lm, lm.cfg
        self.mimi = None if mimi is None else MimiStages(runner, mimi)
        self.text_sampling, self.audio_sampling = sampling_of(options)
        self.frames = 0
        """LM frames run since the reset (host side): decides when output starts."""
        self._tokens = torch.zeros(1 + self.cfg.dep_q, dtype=torch.int64, device=runner.device)  # what `play` plays
        cfg, lines = self.cfg, lm.lines
        self._all = frozenset(range(cfg.n_q + 1))
        self._user = frozenset(range(1 + cfg.model_q, 1 + cfg.n_q))
        self._before = self._all  # the streams the last LM frame took from outside (host side)
        self._prompt_inputs: LMInputs | None = None  # fixed buffers a prompt frame's graphs read
        self.steady_steps = depformer_steps(lines.known_targets(self._user, self._user), cfg.dep_q)
        """The depformer steps of a conversation's frames, whose user codebooks all come from
        outside: PersonaPlex runs its 8 model codebooks and leaves out the user's 8."""

    @property
    def generator(self) -> torch.Generator | None:
        return self.runner.generator

    def configure(self, options: RuntimeOptions) -> None:
        """Sampling parameters are baked into captured graphs: new ones drop them."""
        sampling = sampling_of(options)
        if sampling != (self.text_sampling, self.audio_sampling):
            self.text_sampling, self.audio_sampling = sampling
            self.runner.invalidate()

    @contextlib.contextmanager
    def sampling_as(self, options: RuntimeOptions) -> Iterator[None]:
        """The sampling `options` ask for, while graphs for them are recorded (a regeneration);
        the sampling in use after."""
        kept = self.text_sampling, self.audio_sampling
        self.text_sampling, self.audio_sampling = sampling_of(options)
        try:
            yield
        finally:
            self.text_sampling, self.audio_sampling = kept

    def reset(self) -> None:
        """A new conversation: state and frame count to zero (graphs stay valid)."""
        self.runner.reset()
        self.frames = 0
        self._before = self._all

    @property
    def started(self) -> bool:
        """Output has started: the delay lines hold a whole frame of generated tokens."""
        return self.frames > self.cfg.max_delay + self.lm.lines.lead

    # --- frames --------------------------------------------------------------------------

    def frame(self, pcm: torch.Tensor, mark: Callable[[str], None] = no_mark
              ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """pcm float32 [frame_size] (a pinned host buffer, or on the device) -> (tokens [1 + dep_q],
        pcm [1, 1, frame_size] on the device), or (None, None) during start-up. `mark(stage)`
        is called as each stage is queued."""
        # Start-up frames (no output yet) run the same stages as any other: once all four have
        # run (a prepared session, or a second conversation) they replay too, so the first
        # second of a conversation is as fast as the rest.
        replay = self.runner.may_replay(FRAME_KEYS)
        codes = self.mimi.encode(pcm, replay)
        mark("encode")
        _, tokens, replayed = self._lm_frame(LMInputs(codes[0, :self.cfg.user_q, 0]), mark, LM_KEYS, replay, True)
        if tokens is None:
            return None, None
        out = self.mimi.decode("decode", self._model_codes(tokens), replayed)
        mark("decode")
        return tokens, out

    def encode(self, pcm: torch.Tensor) -> torch.Tensor:
        """The encode stage alone: pcm float32 [frame_size] -> the user's codes [user_q] (a frame
        whose LM part a predicting loop decides). Replayed, the codes are the graph's output:
        copy them to keep them past another graph's replay."""
        return self.mimi.encode(pcm, True)[0, :self.cfg.user_q, 0]

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """The decode stage alone: output tokens [1 + dep_q] from anywhere -> pcm [1, 1,
        frame_size] on the device (read it before the next frame)."""
        self._tokens.copy_(tokens)
        return self.mimi.decode(PLAY_KEY, self._model_codes(self._tokens), True)

    def last_generated(self) -> torch.Tensor:
        """What the last LM frame generated: the delay-line row it committed [1 + dep_q]."""
        lines, store = self.lm.lines, self.runner.store
        row = store[lines.slot_region] % lines.slots
        return store[lines.tokens_region].index_select(0, row)[0, :1 + self.cfg.dep_q]

    def lm_frame(self, inputs: LMInputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One frame of the LM alone, eagerly, from any inputs (LM-only use, reference tests;
        a prompt's frames run through prompt_frame). Returns (the wake's input
        embedding or None when no wake ran, the output tokens or None during start-up)."""
        wake, tokens, _ = self._lm_frame(inputs, no_mark, LM_KEYS, replay=False, steady=False)
        return (None if wake is None else wake.embedding), tokens

    def prompt_frame(self, inputs: LMInputs) -> None:
        """One frame of a prompt (engine.families.moshi.prompts), as lm_frame runs one, but with
        its inputs copied to buffers at fixed addresses and its stages keyed by its kind
        (prompt_keys), so that with graph replay a prompt's frames replay once one of their kind
        has run."""
        if self._prompt_inputs is None:
            cfg, device = self.cfg, self.runner.device
            self._prompt_inputs = LMInputs(*(torch.zeros(n, dtype=torch.int64, device=device)
                                             for n in (cfg.user_q, cfg.model_q, 1)),
                                           embedding=torch.zeros(1, 1, cfg.dim, dtype=self.lm.dtype, device=device))
        fixed = {}
        for field in ("user", "model", "text", "embedding"):
            given, buffer = getattr(inputs, field), getattr(self._prompt_inputs, field)
            fixed[field] = None if given is None else buffer.copy_(given.view(buffer.shape))
        self._lm_frame(LMInputs(**fixed), no_mark, prompt_keys(inputs), self.runner.replay, steady=False)

    def run_lm(self, keys: tuple[Any, Any], backbone: Callable[[], Wake], frames: list[LMInputs],
               mark: Callable[[str], None], replay: bool, steady: bool = True
               ) -> tuple[Wake, torch.Tensor | None, bool]:
        """A wake over `frames`: the backbone stage (the `frame` clock ticked by as many), then
        the depformer on the last position, which commits the frame. Its steps are those the
        frame needs, under a depformer key with their number; with `steady` (a conversation's
        frames and wakes, whose graphs read one another's outputs) the steady number instead,
        under keys[1], and a frame that needs more runs eagerly. Returns (the wake, the output
        tokens or None during start-up, whether it replayed)."""
        steps = self._depformer_steps(frames)
        if steady and steps <= self.steady_steps:
            steps, depformer_key = self.steady_steps, keys[1]
        else:
            depformer_key = (*keys[1], steps) if isinstance(keys[1], tuple) else (keys[1], steps)
            replay = replay and not steady
        wake = self.runner.run(Stage(keys[0], backbone, (("frame", len(frames)),)), replay)
        mark("backbone")
        tokens = self.runner.run(Stage(depformer_key, lambda: self._depformer(wake, steps)), replay)
        mark("depformer")
        self.frames += len(frames)
        return wake, (tokens if self.started else None), replay

    def _depformer_steps(self, frames: list[LMInputs]) -> int:
        """The depformer steps for the last of `frames`, from the streams each took from
        outside (the host's record of them moves past these frames)."""
        before = self._before
        for inputs in frames[:-1]:
            before = self._outside(inputs)
        now = self._before = self._outside(frames[-1])
        return depformer_steps(self.lm.lines.known_targets(now, before), self.cfg.dep_q)

    def _outside(self, inputs: LMInputs) -> frozenset[int]:
        """The streams a frame's inputs write from outside (text 0, then the codebooks)."""
        q = self.cfg.model_q
        return frozenset((*([0] if inputs.text is not None else []),
                          *(range(1, 1 + q) if inputs.model is not None else []),
                          *(self._user if inputs.user is not None else [])))

    def _lm_frame(self, inputs: LMInputs, mark: Callable[[str], None], keys: tuple[Any, Any], replay: bool,
                  steady: bool) -> tuple[Wake | None, torch.Tensor | None, bool]:
        if inputs.user is None and not self.cfg.predicts_user:
            raise ValueError("Moshi needs the user's codes every frame")
        if self.lm.lines.lead and self.frames == 0:
            # PersonaPlex's first step only primes its cache: this frame's tokens are dropped.
            # A replayed embedding is not consumed: the reference retries it on the next step.
            self.frames = 1
            if inputs.embedding is None:
                return None, None, False
        return self.run_lm(keys, lambda: self._backbone(inputs), [inputs], mark, replay, steady)

    def _model_codes(self, tokens: torch.Tensor) -> torch.Tensor:
        q = self.cfg.model_q
        return tokens[1:1 + q].view(1, q, 1)

    # --- the LM's pieces -------------------------------------------------------------------

    def frame_rows(self, frames: list[LMInputs]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Outside tokens into the delay lines and the frames' input embeddings (one [1, N, dim]
        row per frame, or all frames' in one when none brings its own embedding); frames
        before the last are committed as they were generated. Returns (the rows, and the last
        frame's target tokens and which of them came from outside)."""
        lm, store, lines = self.lm, self.runner.store, self.lm.lines
        rows, inputs_tokens = [], []
        for i, inputs in enumerate(frames):
            if inputs.user is not None:
                lines.force(store, 1 + self.cfg.model_q, inputs.user)
            if inputs.model is not None:
                lines.force(store, 1, inputs.model)
            if inputs.text is not None:
                lines.force(store, 0, inputs.text)
            tokens, target, forced = lines.begin_frame(store)
            inputs_tokens.append(tokens)  # a copy: later commits leave it as it is
            rows.append(inputs.embedding)
            if i < len(frames) - 1:
                lines.commit(store, inputs.generated)
        if all(row is None for row in rows):  # every frame's streams embedded at once
            tokens = torch.stack(inputs_tokens) if len(inputs_tokens) > 1 else inputs_tokens[0]
            return [lm.embed_streams(tokens)], target, forced
        return [lm.embed_streams(t) if row is None else row for row, t in zip(rows, inputs_tokens)], target, forced

    def wake_of(self, x: torch.Tensor, frames: int, h: torch.Tensor, text_logits: torch.Tensor,
                target: torch.Tensor, forced: torch.Tensor) -> Wake:
        """The Wake of a backbone pass over x (its first `frames` positions real): the last real
        position's text token sampled on the device."""
        text_token = sample(text_logits[:1], self.text_sampling, self.generator)
        return Wake(x[:, :frames], h[:, :1], text_token, target, forced)

    def _backbone(self, inputs: LMInputs) -> Wake:
        rows, target, forced = self.frame_rows([inputs])
        h, text_logits = self.lm.backbone(rows[0], self.runner.store)
        return self.wake_of(rows[0], 1, h, text_logits, target, forced)

    def _depformer(self, wake: Wake, steps: int) -> torch.Tensor:
        """The frame's codebooks, then commit the frame to the delay lines."""
        generated, _ = self.codebooks(wake.hidden, wake.text_token, wake.target, wake.forced, steps)
        return self.lm.lines.commit(self.runner.store, generated)

    def codebooks(self, hidden: torch.Tensor, text_token: torch.Tensor, target: torch.Tensor,
                  forced: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Codebook by codebook, each step fed the previous token (teacher-forced where the
        token came from outside), for the first `steps` codebooks (depformer_steps: the rest
        are forced, and take their targets). Returns (text token + codebooks [1 + dep_q], the
        first codebook's logits [1, card], None without steps)."""
        lm, store, dep_q = self.lm, self.runner.store, self.cfg.dep_q
        prev = torch.where(forced[:1], target[:1], text_token)
        lm.restart_depformer(store)
        generated, first = [text_token], None
        for k in range(steps):
            logits = lm.depformer_step(k, prev, hidden, store)
            first = logits if first is None else first
            token = sample(logits, self.audio_sampling, self.generator)
            generated.append(token)
            prev = torch.where(forced[k + 1:k + 2], target[k + 1:k + 2], token)
        if steps < dep_q:
            # What a step left out would have sampled is replaced by its target, as a commit
            # keeps a forced token; its random numbers are drawn all the same, so the rest of
            # the conversation draws what it would have (the reference runs every step).
            for _ in range(steps, dep_q):
                draw_unused(self.audio_sampling, self.cfg.card, self.generator, hidden.device)
            generated.append(target[1 + steps:1 + dep_q])
        return torch.cat(generated), first
