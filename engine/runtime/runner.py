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

The backbone stage is a wake over N positions. A plain frame wakes over one; DiffuPlex's wakes
(`wake`: the frames played since the last wake, the current one, K masked future positions)
read their inputs from static buffers and run as two graphs (backbone, depformer) keyed by
(catch-up length, K), at most K + 1 shapes per K; a planned frame's depformer (`planned`) is
one graph per position of the plan.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ..lm.model import MoshiLM
from ..lm.predictor import Predictor
from ..lm.sampling import SamplingParams, sample
from ..mimi import Mimi
from ..state import Store, copy_state
from .graphs import Graphs


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


class Future(NamedTuple):
    """What a predicting wake leaves for the future positions' codebooks."""
    hidden: torch.Tensor  # [1, k, dim]
    text_logits: torch.Tensor  # [k, text_card]
    target: torch.Tensor  # [k, n_q + 1]: target tokens known already (the user's, by delay)
    forced: torch.Tensor  # [k, n_q + 1]: which


class _Plan(NamedTuple):
    """The future positions of the last predicting wake, at fixed addresses (row f: the f-th
    frame after that wake's current one): what `planned` runs the depformer on."""
    hidden: torch.Tensor  # [reach, 1, 1, dim]
    text: torch.Tensor  # [reach] the sampled text token
    text_confidence: torch.Tensor  # [reach] float32: its probability's top
    target: torch.Tensor  # [reach, n_q + 1]
    forced: torch.Tensor  # [reach, n_q + 1] bool


class _WakeInputs(NamedTuple):
    """A wake's inputs at fixed addresses, as its graph reads them."""
    user: torch.Tensor  # [reach, user_q]: the user's codes, frame by frame
    played: torch.Tensor  # [reach, 1 + dep_q]: the generated tokens of the frames caught up
    plan: _Plan  # what a predicting wake writes


_FRAME_STAGES = ("encode", "backbone", "depformer", "decode")


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
        self._graphs = Graphs(self.device, generator) if self.device.type == "cuda" else None
        self._ran: set[Any] = set()
        """Stage keys run eagerly in this store: their lazy initialisation is done, so they may
        be captured."""
        self._staircases: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # DiffuPlex, by K: slots ahead, known
        self._bound: Predictor | None = None  # the predictor captured wake graphs read
        # Graphs read their inputs from device buffers at fixed addresses.
        if mimi is not None:
            self.pcm = torch.zeros(1, 1, mimi.frame_size, dtype=torch.float32, device=self.device)
            self._tokens = torch.zeros(1 + (lm.cfg.dep_q if lm is not None else 0), dtype=torch.int64,
                                       device=self.device)  # what `decode` plays
        if lm is not None:
            self._wake_inputs = self._new_wake_inputs()

    # --- between frames ----------------------------------------------------------------

    @property
    def can_replay(self) -> bool:
        return self._graphs is not None

    @property
    def captured(self) -> set[Any]:
        """The stage keys whose graphs are captured now."""
        return set() if self._graphs is None else set(self._graphs.graphs)

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

    def replace_store(self, store: Store) -> None:
        """Start over in a store of other sizes (between conversations: nothing is copied)."""
        self._invalidate()
        self._ran.clear()  # new shapes: each stage once eagerly before capturing again
        old, self.store = self.store, store
        old.close()
        if self.lm is not None:
            self._wake_inputs = self._new_wake_inputs()

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
        # The frame's graphs read each other's outputs: all of them replay, or none.
        replay = self.replay and self.started and self._ran.issuperset(_FRAME_STAGES)
        self._feed(pcm)
        codes = self._run("encode", self._encode, replay)
        mark("encode")
        _, tokens = self._lm_frame(LMInputs(codes[0, :self.lm.cfg.user_q, 0]), mark, replay)
        if tokens is None:
            return None, None
        out = self._run("decode", lambda: self._decode(tokens), replay)
        mark("decode")
        return tokens, out

    def encode(self, pcm: torch.Tensor) -> torch.Tensor:
        """The encode stage alone: pcm float32 [frame_size] -> the user's codes [user_q] (a
        frame whose LM part a predicting loop decides). Replayed, the codes are the graph's
        output: copy them to keep them past another graph's replay."""
        replay = self.replay and "encode" in self._ran
        self._feed(pcm)
        return self._run("encode", self._encode, replay)[0, :self.lm.cfg.user_q, 0]

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """The decode stage alone: output tokens [1 + dep_q] from anywhere -> pcm [1, 1,
        frame_size] on the device (read it before the next frame)."""
        self._tokens.copy_(tokens)
        return self._run("play", lambda: self._decode(self._tokens), self.replay and "play" in self._ran)

    def last_generated(self) -> torch.Tensor:
        """What the last LM frame generated: the delay-line row it committed [1 + dep_q]."""
        lines = self.lm.lines
        row = self.store[lines.slot_region] % lines.slots
        return self.store[lines.tokens_region].index_select(0, row)[0, :1 + self.lm.cfg.dep_q]

    def codec_frame(self, pcm: torch.Tensor) -> torch.Tensor:
        """Mimi alone: pcm float32 [frame_size] (host or device) -> encoded with every codebook, decoded
        back -> pcm [1, 1, frame_size] on the device. Frame by frame as in a conversation."""
        replay = self.replay and self._ran.issuperset(("encode", "codec_decode"))
        self._feed(pcm)
        codes = self._run("encode", self._encode, replay)
        return self._run("codec_decode", lambda: self.mimi.decode_step(codes, self.store), replay)

    def lm_frame(self, inputs: LMInputs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One frame of the LM alone, eagerly (prompts; LM-only use). Returns (the wake's input
        embedding or None when no wake ran, the output tokens or None during start-up)."""
        wake, tokens = self._lm_frame(inputs, _no_mark, replay=False)
        return (None if wake is None else wake.embedding), tokens

    def wake(self, frames: list[LMInputs], predictor: Predictor | None = None, k: int = 0,
             mark: Callable[[str], None] = _no_mark) -> torch.Tensor | None:
        """One backbone wake over the frames played since the last wake (each carries its
        `generated` tokens and only writes history, as the single step that generated it
        did), the current frame (generated as a single step would be) and, with a predictor,
        `k` masked future positions, which become the plan that `planned` reads. Returns the
        current frame's output tokens (None during start-up). The future positions leave
        nothing a later step reads as history.

        Replayed as two graphs (backbone, depformer) keyed by (catch-up length, k) once that
        shape ran eagerly; the tokens are then the graph's output: copy them to keep them."""
        n = len(frames) - 1
        if predictor is None and k:
            raise ValueError("future positions need a predictor")
        if predictor is not None and not 1 <= k <= predictor.spec.block:
            raise ValueError(f"k = {k}: the predictor was trained for blocks of 1..{predictor.spec.block}")
        self._check_reach(n + 1 + k)
        if (self.frames < self.lm.lines.lead or any(f.generated is None for f in frames[:-1])
                or any(f.user is None or f.model is not None or f.text is not None or f.embedding is not None
                       for f in frames)):
            raise ValueError("a wake runs after the start-up frame, on the user's codes and known generated tokens")
        if predictor is not None and predictor is not self._bound:
            self._invalidate()  # captured wakes read the predictor's weights where they are
            self._bound = predictor
        inputs = self._wake_inputs
        inputs.user[:n + 1].copy_(torch.stack([f.user for f in frames]))
        if n:
            inputs.played[:n].copy_(torch.stack([f.generated for f in frames[:-1]]))
        replay = self.replay and self.started and {("backbone", n, k), ("depformer", n, k)} <= self._ran
        self.store.advance("frame", n + 1)
        wake = self._run(("backbone", n, k), lambda: self._wake_backbone(n, predictor, k), replay)
        mark("backbone")
        tokens = self._run(("depformer", n, k), lambda: self._depformer(wake), replay)
        mark("depformer")
        self.frames += n + 1
        self._planned = k
        return tokens if self.started else None

    def planned(self, f: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The f-th frame after the last wake's current one, as that wake predicted it: the
        depformer on the position's hidden state, run now (a position never played costs no
        depformer). Returns (its text token and codebooks [1 + dep_q], model's then user's;
        its confidence: the lower of the text token's and the first codebook's top
        probability). The outputs are a graph's when replayed: copy what must be kept."""
        if not 0 <= f < self._planned:
            raise ValueError(f"frame {f} of the plan: the last wake planned {self._planned}")
        key = ("planned", f)
        return self._run(key, lambda: self._planned_frame(f), self.replay and self.started and key in self._ran)

    def planned_text(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The text tokens the last wake planned, and their confidence (the top of their
        probabilities): [k] each, on the device (graph outputs when replayed)."""
        plan = self._wake_inputs.plan
        return plan.text[:self._planned], plan.text_confidence[:self._planned]

    # --- stages ------------------------------------------------------------------------

    def _lm_frame(self, inputs: LMInputs, mark: Callable[[str], None], replay: bool
                  ) -> tuple[Wake | None, torch.Tensor | None]:
        if inputs.user is None and not self.lm.cfg.is_personaplex:
            raise ValueError("Moshi needs the user's codes every frame")
        if self.lm.lines.lead and self.frames == 0:
            # PersonaPlex's first step only primes its cache: this frame's tokens are dropped.
            # A replayed embedding is not consumed: the reference retries it on the next step.
            self.frames = 1
            if inputs.embedding is None:
                return None, None
        self.store.advance("frame", 1)
        self._planned = 0  # the plan was the future of an earlier frame
        wake = self._run("backbone", lambda: self._backbone([inputs]), replay)
        mark("backbone")
        tokens = self._run("depformer", lambda: self._depformer(wake), replay)
        mark("depformer")
        self.frames += 1
        return wake, (tokens if self.started else None)

    def _wake_backbone(self, n: int, predictor: Predictor | None, k: int) -> Wake:
        inputs = self._wake_inputs
        frames = [LMInputs(inputs.user[i], generated=inputs.played[i]) for i in range(n)]
        frames.append(LMInputs(inputs.user[n]))
        if not k:
            return self._backbone(frames)
        wake, future = self._backbone(frames, predictor, k)
        plan = inputs.plan  # into the plan, where `planned` reads it
        plan.text[:k].copy_(sample(future.text_logits, self.text_sampling, self.generator))
        plan.text_confidence[:k].copy_(torch.softmax(future.text_logits.float(), dim=-1).amax(dim=-1))
        plan.hidden[:k].copy_(future.hidden.view(k, 1, 1, -1))
        plan.target[:k].copy_(future.target)
        plan.forced[:k].copy_(future.forced)
        return wake

    def _planned_frame(self, f: int) -> tuple[torch.Tensor, torch.Tensor]:
        plan = self._wake_inputs.plan
        row, first = self._codebooks(plan.hidden[f], plan.text[f:f + 1], plan.target[f], plan.forced[f])
        n = row.shape[0]  # tokens known already stay as they are, as a commit keeps them
        generated = torch.where(plan.forced[f, :n], plan.target[f, :n], row)
        return generated, torch.minimum(plan.text_confidence[f], torch.softmax(first.float(), dim=-1).amax())

    def _reach(self) -> int:
        """Positions one wake may cover: what the state was sized for (MoshiLM.regions)."""
        transformer = self.lm.transformer
        return self.store[transformer.kv_region].shape[0] - transformer.cfg.ring + 1

    def _check_reach(self, positions: int) -> None:
        reach = self._reach()
        if positions > reach:
            raise ValueError(f"a wake over {positions} positions; the state was sized for {reach}")

    def _run(self, key: Any, stage: Callable[[], Any], replay: bool) -> Any:
        if replay:
            return self._graphs.run(key, stage)
        self._ran.add(key)
        return stage()

    def _new_wake_inputs(self) -> _WakeInputs:
        reach, cfg, device = self._reach(), self.lm.cfg, self.device
        plan = _Plan(torch.zeros(reach, 1, 1, cfg.dim, dtype=self.lm.dtype, device=device),
                     torch.zeros(reach, dtype=torch.int64, device=device),
                     torch.zeros(reach, dtype=torch.float32, device=device),
                     torch.zeros(reach, 1 + cfg.n_q, dtype=torch.int64, device=device),
                     torch.zeros(reach, 1 + cfg.n_q, dtype=torch.bool, device=device))
        self._planned = 0  # rows of the plan that hold a prediction
        return _WakeInputs(torch.zeros(reach, cfg.user_q, dtype=torch.int64, device=device),
                           torch.zeros(reach, 1 + cfg.dep_q, dtype=torch.int64, device=device), plan)

    def _invalidate(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()

    def _feed(self, pcm: torch.Tensor) -> None:
        """A frame's audio into the encoder's fixed input buffer, its clock ticked first."""
        self.pcm.view(-1).copy_(pcm, non_blocking=True)
        self.store.advance("mimi_step", self.mimi.cfg.resample_stride)

    def _encode(self) -> torch.Tensor:
        return self.mimi.encode_step(self.pcm, self.store)

    def _decode(self, tokens: torch.Tensor) -> torch.Tensor:
        q = self.lm.cfg.model_q
        return self.mimi.decode_step(tokens[1:1 + q].view(1, q, 1), self.store)

    def _backbone(self, frames: list[LMInputs], predictor: Predictor | None = None, k: int = 0):
        """Outside tokens into the delay lines and each frame's input embedding (frames already
        generated are committed as they were), the temporal transformer over all of them (and
        k masked future positions after them), the last frame's text token. Returns the Wake,
        and with k > 0 also the Future."""
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
        if k:
            masked, future_target, future_forced = self._masked_rows(predictor, k)
            rows.append(masked)
        x = rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)
        h, text_logits = lm.backbone(x, store, predictor.at_last(k) if k else None, future=k)
        text_token = sample(text_logits[:1], self.text_sampling, self.generator)
        wake = Wake(x[:, :len(frames)], h[:, :1], text_token, target, forced)
        if not k:
            return wake
        return wake, Future(h[:, 1:], text_logits[1:], future_target, future_forced)

    def _depformer(self, wake: Wake) -> torch.Tensor:
        """The frame's codebooks, then commit the frame to the delay lines."""
        generated, _ = self._codebooks(wake.hidden, wake.text_token, wake.target, wake.forced)
        return self.lm.lines.commit(self.store, generated)

    def _codebooks(self, hidden: torch.Tensor, text_token: torch.Tensor, target: torch.Tensor,
                   forced: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Codebook by codebook, each step fed the previous token (teacher-forced where the
        token came from outside). Returns (text token + codebooks [1 + dep_q], the first
        codebook's logits [1, card])."""
        lm, store, cfg = self.lm, self.store, self.lm.cfg
        prev = torch.where(forced[:1], target[:1], text_token)
        lm.restart_depformer(store)
        generated, first = [text_token], None
        for k in range(cfg.dep_q):
            logits = lm.depformer_step(k, prev, hidden, store)
            first = logits if first is None else first
            token = sample(logits, self.audio_sampling, self.generator)
            generated.append(token)
            prev = torch.where(forced[k + 1:k + 2], target[k + 1:k + 2], token)
        return torch.cat(generated), first

    # --- DiffuPlex: what a wake predicts ----------------------------------------------------

    def _masked_rows(self, predictor: Predictor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The k future positions' input embeddings [1, k, dim] (a stream's token where it is
        known, its MASK embedding where not) and, for each, the target tokens known already
        and which. Known: the user's codes of the current frame, which land `lead + delay`
        slots ahead (the staircase: each stream becomes unknown at its own delay); nothing the
        model generates is known past the current frame."""
        lm, lines, store = self.lm, self.lm.lines, self.store
        if k not in self._staircases:  # on the device once: a host tensor here would synchronize
            known = [lines.known_ahead(f) for f in range(1, k + 2)]
            self._staircases[k] = (torch.arange(1, k + 1, device=self.device),
                                   torch.tensor(known, device=self.device))
        ahead, known = self._staircases[k]
        tokens = store[lines.tokens_region]
        slots = (store[lines.slot_region] + ahead) % lines.slots
        x = lm.embed_known(tokens.index_select(0, slots), known[:k], predictor.mask_embeddings)
        targets = tokens.index_select(0, (slots + 1) % lines.slots)
        return x, targets, known[1:]
