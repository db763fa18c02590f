"""Streaming token2wav: chunks of speech tokens in, audio out, with the official retention. A stream
starts from a voice prompt (speech tokens, speaker embedding, mel), run through the flow once to
fill the caches. Later chunks carry fresh tokens plus `pre_lookahead_len` (3) lookahead tokens that
the next repeats; the last carries none and flushes. After each chunk the caches keep the prompt and
the last RETAINED_FRAMES mel frames (the stock Token2wav's policy: attention reaches the prompt and
the recent past, so memory and time per chunk stay bounded); the vocoder runs on each chunk's fresh
mel with its own bounded history. A push is planned on the host first (`Token2wavStream.plan`, from
host counters only: a `ChunkKey` fixing every shape and host branch of the chunk's device work, and
the counters after it), then runs, eagerly or (`RuntimeOptions.graph_replay`, CUDA) as the key's
graph in one shared pool, through the stage runner (engine.runtime.stages), which ticks the `mel`
clock and owns capture. Inputs sit at fixed addresses (store, noise table, a token buffer per chunk
length, per-key device constants), nothing read back to the host: replayed or eager, the same bits.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch

from ..options import RuntimeOptions
from ..runtime.stages import Stage, StageRunner
from ..state import save_state
from ..state.placement import new_store
from .chunk_plan import RETAINED_FRAMES, FlowCounters, FlowPlan, chunk_bounds
from .flow_stream import FlowInputs, FlowStream
from .prompt import Prompt
from .vocoder_stream import StreamingVocoder, VocoderPlan

__all__ = ["RETAINED_FRAMES", "ChunkKey", "Counters", "Prompt", "Token2wavStream"]

WARM_UP_CHUNKS = 8
"""The most chunk keys a stream captures at creation (the first chunks and the steady one)."""


class ChunkKey(NamedTuple):
    """One push's device work: equal keys, equal work (and one captured graph)."""
    flow: FlowPlan | None  # None: an empty last push, which only flushes the vocoder
    vocoder: VocoderPlan
    silence: bool  # the stream's first audio: the vocoder's delay goes before it as silence


class Counters(NamedTuple):
    """What the host knows of a stream between pushes: all a plan is computed from."""
    flow: FlowCounters
    vocoder: int  # mel frames the vocoder has received
    finalized: bool  # the last chunk was pushed
    started: bool  # audio has come out


class Token2wavStream:
    """A whole stream: the flow's chunks through the vocoder. `push` returns the audio [1, n]
    (24 kHz, float32) that became final; the first audio of a stream that goes on starts with
    the vocoder's delay in silence, as the stock runtime plays it (so a chunk's audio lines up
    with its tokens). The audio is the stream's own tensor (a graph's output when replayed):
    read or copy it before the next push.

    Its state is declared (`FlowStream.regions` and the vocoder's) and placed by
    `options.demand_sized_state` as a conversation's is: full size at once, or memory that
    follows the `mel` clock at stable addresses. With `options.graph_replay` on CUDA, a key
    runs eagerly the first time it occurs and is captured the second; at creation the stream
    warms up (`warm_up`) so that the first chunks of `max_chunk` tokens and the steady one are
    replays from the start. The output is the same with every toggle."""

    @torch.inference_mode()
    def __init__(self, model, prompt: Prompt, steps: int = 10, noise: torch.Tensor | None = None,
                 options: RuntimeOptions | None = None, max_chunk: int = 28, warm_up: bool | None = None):
        """`warm_up`: run (and with graphs, capture) the first chunks' keys before the prompt;
        None: when graphs are replayed."""
        flow, options = model.flow, options or RuntimeOptions()
        noise = model.noise if noise is None else noise
        prompt = prompt.to(model.device, flow.input_embedding.weight.dtype)
        self.vocoder = StreamingVocoder(model.vocoder)
        regions = (FlowStream.regions(flow, prompt.mel.shape[1], steps, max_chunk)
                   + self.vocoder.regions("t2w.vocoder"))
        self.runner = StageRunner(new_store(regions, model.device, options), model.device, None, options)
        self.vocoder.place({name: self.store[f"t2w.vocoder.{name}"] for name in self.vocoder.state_shapes()})
        self.flow = FlowStream(flow, noise, prompt, steps, self.store, max_chunk)
        self.lookahead, self.max_chunk = flow.pre_lookahead_len, max_chunk
        self.silence = self.vocoder.geometry.delay * self.vocoder.hop
        self.started = False
        self._tokens: dict[int, torch.Tensor] = {}  # static token buffers by chunk length
        self._inputs: dict[FlowPlan, FlowInputs] = {}
        self._spare: list[tuple[ChunkKey, int]] = []  # keys to prepare between turns, with the mel ticks before them
        if self.runner.replay if warm_up is None else warm_up:
            self.warm_up()
        work, plan, self._prompt_after = self.flow.prompt_work(prompt)
        self._prompt = Stage("prompt", work, (("mel", plan.frames),))
        self._start()

    def _start(self) -> None:
        """The voice prompt through the flow, once and eagerly, and the state it leaves saved: each restart
        (a conversation's turn end) copies it back, as the stock copies its `flow_cache_base`. Computed again
        (even replayed), it took a pass of the flow in the unit that ended the turn."""
        self.runner.run(self._prompt, replay=False)
        self.flow.counters = self._prompt_after
        self._after_prompt = save_state(self.store)

    @torch.inference_mode()
    def restart(self) -> None:
        """A new stream in this one's state and graphs (a conversation's next turn): the state back to
        zero at the same addresses (no row backed), the counters to the start, the prompt run again.
        What follows is what a new stream would give, without capturing its graphs anew."""
        self.vocoder.reset()
        self.runner.restore(self._after_prompt)
        self.flow.counters = self._prompt_after
        self.started = False

    def nbytes(self) -> int:
        """The stream's state and the prompt's saved copy of it."""
        return self.store.nbytes() + self._after_prompt.nbytes()

    @property
    def store(self):
        """The stream's declared state (the runner's store)."""
        return self.runner.store

    @property
    def graphs(self):
        """The stream's captured graphs (None where graphs are not replayed: the CPU)."""
        return self.runner.graphs if self.runner.replay else None

    # --- the host side ---------------------------------------------------------------------

    @property
    def counters(self) -> Counters:
        return Counters(self.flow.counters, self.vocoder.frames, self.vocoder.finalized, self.started)

    def plan(self, tokens: int, last: bool, counters: Counters | None = None) -> tuple[ChunkKey, Counters]:
        """A push of `tokens` tokens from `counters` (the stream's own by default): its key and
        the counters after it. Host arithmetic only."""
        counters = counters or self.counters
        if counters.finalized:
            raise ValueError("the stream has ended (its last chunk was pushed)")
        if not last and tokens <= self.lookahead:
            raise ValueError(f"a chunk that is not the last needs fresh tokens plus {self.lookahead} of lookahead, "
                             f"got {tokens}")
        flow, flow_after = None, counters.flow
        if tokens:
            flow, flow_after = self.flow.plan(counters.flow, tokens, last)
        vocoder = self.vocoder.plan(counters.vocoder, flow.frames if flow else 0, last)
        sounds = vocoder.samples > 0
        key = ChunkKey(flow, vocoder, silence=sounds and not counters.started and not last)
        return key, Counters(flow_after, counters.vocoder + vocoder.frames, last, counters.started or sounds)

    def chunks(self, count: int, size: int) -> list[tuple[int, int, bool]]:
        """(start, stop, last) of the pushes that stream `count` tokens: `size` fresh tokens plus
        this stream's lookahead (which the next push repeats) each, then the rest as the last."""
        return list(chunk_bounds(count, self.lookahead, size))

    def schedule(self, tokens: int, counters: Counters, limit: int) -> list[ChunkKey]:
        """The keys of pushes of `tokens` tokens from `counters`, until one repeats (the steady
        chunk) or `limit` keys."""
        keys: list[ChunkKey] = []
        while len(keys) < limit:
            key, counters = self.plan(tokens, False, counters)
            if key in keys:
                break
            keys.append(key)
        return keys

    # --- pushes --------------------------------------------------------------------------------

    @torch.inference_mode()
    def push(self, tokens: torch.Tensor, last: bool = False) -> torch.Tensor:
        """tokens [1, n]: fresh tokens plus `lookahead` more (n > lookahead), or for the last
        chunk any number (0: flush the vocoder only)."""
        if tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"tokens must be [1, n], got {tuple(tokens.shape)}")
        key, after = self.plan(tokens.shape[1], last)
        if key.flow is not None:
            self._token_buffer(key.flow.tokens).copy_(tokens)
        audio = self._execute(key)
        self.flow.counters, self.started = after.flow, after.started
        self.vocoder.advance(key.vocoder)
        return audio

    @property
    def captured(self) -> set[ChunkKey]:
        return self.runner.captured

    @torch.inference_mode()
    def warm_up(self) -> None:
        """Before the prompt runs: each key of the first chunks of `max_chunk` tokens, up to the
        steady one, runs once eagerly (lazy initialisation: cuBLAS and cuFFT plans) and, with
        graphs, is captured, so the stream's first chunk is already a replay; so does the last
        push that ends a stream after each of them (its `lookahead` tokens and the vocoder's
        flush: how a conversation's turn ends when its speech filled whole chunks), which would
        otherwise run eagerly, ten times a replay's time, as the turn ends. The keys come from
        the counters the prompt leaves (host arithmetic, `plan`); the work runs on the store as
        it is (empty: values do not matter, only shapes and addresses do), each last push with
        the `mel` clock where its chunks leave it; then the store is reset, so the state
        afterwards is the state before: zeros, no row backed."""
        if self.store.ticks("t2w.estimator.att"):
            raise RuntimeError("warm_up runs on a fresh stream, before its prompt")
        prompt, counters = self.flow.prompt_plan()
        counters = Counters(counters, 0, False, False)
        keys, lasts = [], []
        while len(keys) < WARM_UP_CHUNKS:
            key, counters = self.plan(self.max_chunk, False, counters)
            if key in keys:
                break
            keys.append(key)
            lasts.append(self.plan(self.lookahead, True, counters)[0])
        stages = [self._stage(key) for key in keys]
        # The rows the prompt fills, backed first as they would be.
        stages[0] = stages[0]._replace(ticks=(("mel", prompt.frames), *stages[0].ticks))
        self.runner.prepare(stages)
        self.store.reset()
        ticks = prompt.frames
        for key, last in zip(keys, lasts, strict=True):
            ticks += key.flow.frames
            if not self.runner.prepared((last,)):
                self.store.ensure({"mel": ticks})
                self.runner.prepare([self._stage(last)])
                self.store.reset()

    def plan_spare(self, pushes: range, ends: range) -> None:
        """The keys `prepare_spare` prepares between turns: pushes of each length in `pushes` and last
        pushes of each length in `ends` once the caches settle (how a turn of three chunks or more
        goes on and ends), then where a turn starts, and the end after each first push. Where they
        are not prepared, a turn whose unit makes fewer speech tokens than a chunk (its last one, or
        a short turn) runs a push eagerly, at ten times a replay's time."""
        prompt, counters = self.flow.prompt_plan()
        start = after = Counters(counters, 0, False, False)
        ticks, steady = prompt.frames, []
        while True:  # to the settled caches: the steady push repeats
            key, following = self.plan(self.max_chunk, False, after)
            if key in steady:
                break
            steady.append(key)
            ticks, after = ticks + key.flow.frames, following
        spare = [(self.plan(n, False, after)[0], ticks) for n in pushes]
        spare += [(self.plan(n, True, after)[0], ticks) for n in ends]
        for n in pushes:
            key, following = self.plan(n, False, start)
            spare += [(key, prompt.frames), (self.plan(self.lookahead, True, following)[0],
                                             prompt.frames + key.flow.frames)]
        spare += [(self.plan(n, True, start)[0], prompt.frames) for n in ends]
        self._spare = list(dict.fromkeys(spare))

    @property
    def spare_left(self) -> int:
        """Keys `plan_spare` named that are not prepared yet."""
        self._spare = [(key, ticks) for key, ticks in self._spare if not self.runner.prepared((key,))]
        return len(self._spare)

    @property
    def at_start(self) -> bool:
        """Whether the stream is where a turn starts (after the prompt, nothing pushed)."""
        return self.flow.counters == self._prompt_after and not self.started and not self.vocoder.frames

    @torch.inference_mode()
    def prepare_spare(self) -> None:
        """Prepare (run once and, with graphs, capture) the next key `plan_spare` named, on the state
        as it is where the key runs (values do not matter, only shapes and addresses do), then restart:
        only between turns (`at_start`), which this leaves as it found."""
        if not self.at_start:
            raise RuntimeError("spare keys are prepared between turns, where the stream restarts")
        if self.spare_left:
            key, ticks = self._spare.pop(0)
            if key.flow is not None:
                self.store.ensure({"mel": ticks})
            self.runner.prepare([self._stage(key)])
            self.restart()

    def close(self) -> None:
        self.runner.close()

    # --- the device side -------------------------------------------------------------------

    def _execute(self, key: ChunkKey) -> torch.Tensor:
        """The key's work through the runner: the `mel` clock ticked first (demand-sized rings
        back the new rows), then replayed once the key has run eagerly before, else eagerly."""
        return self.runner.run(self._stage(key))

    def _stage(self, key: ChunkKey) -> Stage:
        """The key's work as a function of fixed tensors: static inputs are made here, outside it."""
        if key.flow is None:
            return Stage(key, partial(self._work, key, None, None))
        if key.flow not in self._inputs:
            self._inputs[key.flow] = self.flow.inputs(key.flow)
        work = partial(self._work, key, self._token_buffer(key.flow.tokens), self._inputs[key.flow])
        return Stage(key, work, (("mel", key.flow.frames),))

    def _token_buffer(self, n: int) -> torch.Tensor:
        if n not in self._tokens:
            self._tokens[n] = torch.zeros(1, n, dtype=torch.int64, device=self.flow.spk.device)
        return self._tokens[n]

    def _work(self, key: ChunkKey, tokens: torch.Tensor | None, inputs: FlowInputs | None) -> torch.Tensor:
        state = self.vocoder.state
        mel = state["mel"][:, :, :0] if key.flow is None else self.flow.work(key.flow, tokens, inputs).float()
        audio = self.vocoder.run(state, mel, key.vocoder)
        if key.silence:
            audio = torch.cat([audio.new_zeros(1, self.silence), audio], dim=1)
        return audio
