"""The frame runner: how one 80 ms frame runs, written once.

A frame is four stages (engine.frame.STAGES), each a function of static device buffers and
the declared state:

    encode     microphone PCM -> the user's codes                      (Mimi encoder)
    backbone   a wake of the temporal transformer over N positions -> hidden state, text token
    depformer  hidden state -> the frame's audio codebooks              (sampled on the device)
    decode     the model's codebooks -> PCM                             (Mimi decoder)

The runner owns everything around them: it ticks every clock (before the stage that writes
the new entries; nothing else ticks a clock), runs each stage eagerly or replays its captured
CUDA graph, decides when capture is safe (after one eager steady frame has done every lazy
initialisation), and drops the graphs when they stop being valid (state moved to another
placement, or sampling parameters that are baked into them changed). The models stay plain
modules that read and write declared state; see docs/architecture.md, "The life of a frame".

The backbone stage is a wake over N positions, and its graph is keyed by N, so that a
multi-frame wake can reuse this path; every wake today covers one position (N = 1).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ..lm.model import MoshiLM
from ..lm.sampling import SamplingParams, sample
from ..mimi import Mimi
from ..state import Store, copy_state


@dataclasses.dataclass(frozen=True)
class LMInputs:
    """What enters the LM from outside in one frame."""
    user: torch.Tensor | None
    """[user_q] the user's codes (int64, on the LM's device); None: PersonaPlex predicts them."""
    model: torch.Tensor | None = None
    """[model_q] force the model's own codebooks (prompts)."""
    text: torch.Tensor | None = None
    """[1] force the text token (prompts)."""
    embedding: torch.Tensor | None = None
    """[1, 1, dim] replaces the summed input embeddings (a replayed voice prompt)."""
    generated: torch.Tensor | None = None
    """[1 + dep_q] what this frame generates, known already (a frame consumed from a
    prediction): in a multi-position wake such a frame only writes history."""


class Wake(NamedTuple):
    """The backbone stage's outputs: what the depformer takes, and the wake's input."""
    embedding: torch.Tensor  # [1, N, dim]: the input embeddings (what a voice prompt saves)
    hidden: torch.Tensor  # [1, 1, dim]: the temporal transformer's output at the last position
    text_token: torch.Tensor  # [1]
    target: torch.Tensor  # [n_q + 1]: tokens already in the slot this frame generates
    forced: torch.Tensor  # [n_q + 1]: which of them came from outside (teacher forcing)


class _Graphs:
    """Captured CUDA graphs by stage key, sharing one memory pool. The session's generator is
    registered with each, so a replay draws the same random numbers as the eager path."""

    def __init__(self, device: torch.device, generator: torch.Generator | None):
        self.device, self.generator = device, generator
        self.pool = None
        self.graphs: dict[Any, tuple[torch.cuda.CUDAGraph, Any]] = {}

    def run(self, key: Any, stage: Callable[[], Any]) -> Any:
        if key not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            if self.generator is not None:
                graph.register_generator_state(self.generator)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            torch.cuda.synchronize(self.device)
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = stage()  # recorded, not run: the replay below runs it
            self.graphs[key] = graph, outputs
        graph, outputs = self.graphs[key]
        graph.replay()
        return outputs

    def clear(self) -> None:
        self.graphs.clear()
        self.pool = None


def _no_mark(stage: str) -> None:
    pass


class FrameRunner:
    """Runs the frames of one conversation over one store. `mimi` may be None to run the LM
    alone (prompts, reference tests); `lm` may be None to run the codec alone (`codec_frame`)."""

    def __init__(self, lm: MoshiLM | None, mimi: Mimi | None, store: Store, generator: torch.Generator | None,
                 sampling: tuple[SamplingParams, SamplingParams] | None = None):
        self.lm, self.mimi, self.store, self.generator = lm, mimi, store, generator
        self.text_sampling, self.audio_sampling = sampling or (None, None)
        self.device = lm.device if lm is not None else mimi.device
        self.replay = False
        self.frames = 0
        """LM frames run since the reset (host side): decides when output starts."""
        self._graphs = _Graphs(self.device, generator) if self.device.type == "cuda" else None
        self._warm = False  # an eager steady frame ran: lazy initialisation is done
        if mimi is not None:
            # Graphs read their input from one device buffer at a fixed address.
            self.pcm = torch.zeros(1, 1, mimi.frame_size, dtype=torch.float32, device=self.device)

    # --- between frames ----------------------------------------------------------------

    @property
    def can_replay(self) -> bool:
        return self._graphs is not None

    @property
    def graph_count(self) -> int:
        return 0 if self._graphs is None else len(self._graphs.graphs)

    def configure(self, *, replay: bool, sampling: tuple[SamplingParams, SamplingParams] | None = None) -> None:
        """Takes effect at the next frame. Sampling parameters are baked into captured graphs,
        so new ones drop them."""
        self.replay = replay and self.can_replay
        if sampling is not None and sampling != (self.text_sampling, self.audio_sampling):
            self.text_sampling, self.audio_sampling = sampling
            self._invalidate()

    def move_state(self, store: Store) -> None:
        """Continue the conversation in another placement: the state is copied and moves, so
        captured graphs (which point into the old one) go."""
        try:
            copy_state(self.store, store)
        except BaseException:
            store.close()  # the conversation goes on in the old placement
            raise
        self._invalidate()
        old, self.store = self.store, store
        old.close()

    def reset(self) -> None:
        """A new conversation: state and frame count to zero (graphs stay valid)."""
        self.store.reset()
        self.frames = 0

    def close(self) -> None:
        """Graphs first: they may point into state mapped outside torch's allocator."""
        self._invalidate()
        self.store.close()

    @property
    def started(self) -> bool:
        """Output has started: the delay lines hold a whole frame of generated tokens."""
        return self.frames > self.lm.cfg.max_delay + self.lm.lines.lead

    # --- frames ------------------------------------------------------------------------

    def frame(self, pcm: torch.Tensor, mark: Callable[[str], None] = _no_mark
              ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """pcm float32 [frame_size] (a pinned host buffer, or on the device) -> (tokens [1 + dep_q], pcm
        [1, 1, frame_size] on the device), or (None, None) during start-up. `mark(stage)` is
        called as each stage is queued."""
        replay = self.replay and self._warm and self.started
        self.pcm.view(-1).copy_(pcm, non_blocking=True)
        self.store.advance("mimi_step", self.mimi.cfg.resample_stride)
        codes = self._run("encode", self._encode, replay)
        mark("encode")
        _, tokens = self._lm_frame([LMInputs(codes[0, :self.lm.cfg.user_q, 0])], mark, replay)
        if tokens is None:
            return None, None
        q = self.lm.cfg.model_q
        out = self._run("decode", lambda: self.mimi.decode_step(tokens[1:1 + q].view(1, q, 1), self.store), replay)
        mark("decode")
        self._warm = True
        return tokens, out

    def codec_frame(self, pcm: torch.Tensor) -> torch.Tensor:
        """Mimi alone: pcm float32 [frame_size] (host or device) -> encoded with every codebook, decoded
        back -> pcm [1, 1, frame_size] on the device. Frame by frame as in a conversation."""
        replay = self.replay and self._warm
        self.pcm.view(-1).copy_(pcm, non_blocking=True)
        self.store.advance("mimi_step", self.mimi.cfg.resample_stride)
        codes = self._run("encode", self._encode, replay)
        out = self._run("codec_decode", lambda: self.mimi.decode_step(codes, self.store), replay)
        self._warm = True
        return out

    def lm_frame(self, inputs: LMInputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One frame of the LM alone, eagerly (prompts; LM-only use). Returns (the wake's input
        embedding or None when no wake ran, the output tokens or None during start-up)."""
        return self.lm_wake([inputs])

    def lm_wake(self, frames: list[LMInputs]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One backbone wake over several frames of the LM alone, eagerly: every frame but the
        last carries `generated` (it only writes history, as the single step that generated it
        did); the last is generated as `lm_frame` would. Returns as `lm_frame` does."""
        wake, tokens = self._lm_frame(frames, _no_mark, replay=False)
        return (None if wake is None else wake.embedding), tokens

    # --- stages ------------------------------------------------------------------------

    def _lm_frame(self, frames: list[LMInputs], mark: Callable[[str], None], replay: bool
                  ) -> tuple[Wake | None, torch.Tensor | None]:
        cfg = self.lm.cfg
        if any(f.user is None for f in frames) and not cfg.is_personaplex:
            raise ValueError("Moshi needs the user's codes every frame")
        if self.lm.lines.lead and self.frames == 0:
            # PersonaPlex's first step only primes its cache: this frame's tokens are dropped.
            # A replayed embedding is not consumed: the reference retries it on the next step.
            self.frames = 1
            if frames[0].embedding is None:
                frames = frames[1:]
                if not frames:
                    return None, None
        positions = len(frames)
        if positions > 1:
            if positions > cfg.wake_positions:
                raise ValueError(f"a wake over {positions} positions; this LM keeps KV for {cfg.wake_positions}")
            if replay or any(f.generated is None or f.embedding is not None for f in frames[:-1]):
                raise ValueError("a multi-position wake runs eagerly, on frames with known generated tokens")
        self.store.advance("frame", positions)
        wake = self._run(("backbone", positions), lambda: self._backbone(frames), replay)
        mark("backbone")
        tokens = self._run("depformer", lambda: self._depformer(wake), replay)
        mark("depformer")
        self.frames += positions
        return wake, (tokens if self.started else None)

    def _run(self, key: Any, stage: Callable[[], Any], replay: bool) -> Any:
        return self._graphs.run(key, stage) if replay else stage()

    def _invalidate(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()

    def _encode(self) -> torch.Tensor:
        return self.mimi.encode_step(self.pcm, self.store)

    def _backbone(self, frames: list[LMInputs]) -> Wake:
        """Outside tokens into the delay lines and each frame's input embedding (frames already
        generated are committed as they were), the temporal transformer over all of them, the
        last frame's text token."""
        lm, store, cfg, lines = self.lm, self.store, self.lm.cfg, self.lm.lines
        rows = []
        for i, inputs in enumerate(frames):
            if inputs.user is not None:
                lines.force(store, 1 + cfg.model_q, inputs.user)
            if inputs.model is not None:
                lines.force(store, 1, inputs.model)
            if inputs.text is not None:
                lines.force(store, 0, inputs.text)
            tokens, target, forced = lines.begin_frame(store)
            rows.append(lm.embed_streams(tokens) if inputs.embedding is None else inputs.embedding)
            if i < len(frames) - 1:
                lines.commit(store, inputs.generated)
        x = rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)
        h, text_logits = lm.backbone(x, store)
        return Wake(x, h, sample(text_logits, self.text_sampling, self.generator), target, forced)

    def _depformer(self, wake: Wake) -> torch.Tensor:
        """Codebook by codebook, each step fed the previous token (teacher-forced where the
        token came from outside); then commit the frame to the delay lines."""
        lm, store, cfg = self.lm, self.store, self.lm.cfg
        target, forced = wake.target, wake.forced
        prev = torch.where(forced[:1], target[:1], wake.text_token)
        lm.restart_depformer(store)
        generated = [wake.text_token]
        for k in range(cfg.dep_q):
            token = sample(lm.depformer_step(k, prev, wake.hidden, store), self.audio_sampling, self.generator)
            generated.append(token)
            prev = torch.where(forced[k + 1:k + 2], target[k + 1:k + 2], token)
        return lm.lines.commit(store, torch.cat(generated))
