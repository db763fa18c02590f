"""The flow's side of a token2wav stream: its declared state, and the device work of one call.

The caches are declared regions (`regions`) in a store the caller places: the conformer's and
every Euler step's estimator attention rows on the `mel` clock (one entry per mel frame, up to the
prompt, the retained frames and one call), their convolution tails fixed. Rows are kept in arrival
order and written in place; a call reads views of exactly the rows in use, never a row a
demand-sized store has not backed, and the retention moves the kept rows down in the same memory.

A call is a host plan (engine.token2wav.chunk_plan, from host counters only) and `work`, a function
of that plan and of tensors at fixed addresses: the store's regions, the noise table, the speaker
vector, the call's tokens and its `FlowInputs` (built once per plan, outside the work). `work` reads
nothing back to the host and makes no tensor from host data, so it can be captured as a CUDA graph.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch

from ..state import Region
from .chunk_plan import RETAINED_FRAMES, FlowCounters, FlowPlan, plan_flow
from .flow import Flow
from .prompt import Prompt


class FlowInputs(NamedTuple):
    """The device constants of one plan."""
    att_len: torch.Tensor  # 0-d int64: the conformer's cache length (`forward_chunk_fixed` reads it there)
    kept: torch.Tensor | None  # int64 [rows]: the estimator rows the retention gathers


class FlowStream:
    """The flow of one stream: its regions in `store`, its host counters (`counters`), its
    plans and their device work. The stream (engine.token2wav.token2wav_stream) ticks the clock and
    advances the counters; this class only computes."""

    def __init__(self, flow: Flow, noise: torch.Tensor, prompt: Prompt, steps: int, store, max_chunk: int = 28):
        prompt.check(flow.up_rate)
        self.flow, self.noise, self.steps, self.store = flow, noise, steps, store
        self.prompt_frames, self.max_chunk = prompt.mel.shape[1], max_chunk
        self.spk = flow.speaker(prompt.speaker)  # computed once: every call reads it here
        self.counters = FlowCounters()

    @property
    def enc_tokens(self) -> int:
        return self.counters.enc_tokens

    @property
    def est_order(self) -> tuple[int, ...]:
        return self.counters.est_order

    @staticmethod
    def rows(flow: Flow, prompt_frames: int, max_chunk: int) -> int:
        """Attention rows one call may need: the prompt's call starts from empty caches (its
        own frames), a chunk's from the retained ones (the prompt's and RETAINED_FRAMES) and
        adds at most `max_chunk` tokens' frames (a last chunk has no lookahead)."""
        return prompt_frames + RETAINED_FRAMES + flow.up_rate * max_chunk

    @staticmethod
    def regions(flow: Flow, prompt_frames: int, steps: int, max_chunk: int = 28, prefix: str = "t2w") -> list[Region]:
        """The stream's state for a prompt of `prompt_frames` mel frames, `steps` Euler steps
        and chunks of at most `max_chunk` tokens (fresh plus lookahead)."""
        enc, dit = flow.encoder, flow.decoder.estimator
        attn = enc.encoders[0].self_attn
        rows = FlowStream.rows(flow, prompt_frames, max_chunk)
        dtype = flow.input_embedding.weight.dtype
        layers = len(enc.encoders) + len(enc.up_encoders)
        return [
            Region(f"{prefix}.encoder.att", (layers, 1, attn.h, 2 * attn.d_k), dtype, "mel", rows),
            Region(f"{prefix}.encoder.cnn", (1, enc.output_size(), 2 + 2 * flow.up_rate), dtype),
            Region(f"{prefix}.estimator.att", (steps, len(dit.blocks), 2, dit.num_heads, 2 * dit.head_dim), dtype,
                   "mel", rows),
            Region(f"{prefix}.estimator.cnn", (steps, len(dit.blocks), 2, 2 * dit.hidden_size, 2), dtype),
        ]

    def plan(self, counters: FlowCounters, tokens: int, last: bool,
             prompt: bool = False) -> tuple[FlowPlan, FlowCounters]:
        """A call with `tokens` tokens (fresh plus lookahead, n > lookahead unless last) from
        `counters`: its plan and the counters after it."""
        if not prompt and tokens > self.max_chunk:
            raise ValueError(f"a chunk of {tokens} tokens is longer than this stream's state holds ({self.max_chunk})")
        return plan_flow(counters, tokens, last, prompt_frames=self.prompt_frames, up=self.flow.up_rate,
                         lookahead=self.flow.pre_lookahead_len, prompt=prompt)

    def prompt_plan(self) -> tuple[FlowPlan, FlowCounters]:
        """The voice prompt's call, from empty caches: its tokens and the stock setup's stand-in
        lookahead (its own first tokens)."""
        tokens = self.prompt_frames // self.flow.up_rate + self.flow.pre_lookahead_len
        return self.plan(FlowCounters(), tokens, last=False, prompt=True)

    def inputs(self, plan: FlowPlan) -> FlowInputs:
        """The plan's device constants (host-to-device copies: build them outside `work`)."""
        device = self.spk.device
        kept = None if plan.est_kept is None else torch.tensor(plan.est_kept, device=device)
        return FlowInputs(torch.tensor(plan.enc_tokens, device=device), kept)

    def prompt_work(self, prompt: Prompt) -> tuple[Callable[[], torch.Tensor], FlowPlan, FlowCounters]:
        """The voice prompt's call as work on fixed tensors (its inputs made here, once), its plan and
        the counters after it: the caches filled from empty, the store's `mel` clock ticked by the
        plan's frames first. A stream runs it at its start and again at each restart (a replay)."""
        plan, after = self.prompt_plan()
        lookahead = prompt.tokens[:, :self.flow.pre_lookahead_len]
        tokens, cond = torch.cat([prompt.tokens, lookahead], dim=1), prompt.mel.transpose(1, 2)
        return partial(self.work, plan, tokens, self.inputs(plan), cond), plan, after

    def work(self, plan: FlowPlan, tokens: torch.Tensor, inputs: FlowInputs,
             cond: torch.Tensor | None = None) -> torch.Tensor:
        """The device work of `plan`: tokens [1, plan.tokens] -> mel [1, 80, plan.frames], the
        caches updated in place (the store's `mel` clock already advanced by plan.frames)."""
        flow, store = self.flow, self.store
        enc_rows = flow.up_rate * (plan.enc_tokens + plan.fresh)
        h = flow.encoder.forward_chunk_fixed(flow.input_embedding(tokens), plan.last, store["t2w.encoder.cnn"],
                                             _rows_on_axis_3(store["t2w.encoder.att"][:enc_rows]), inputs.att_len)
        mu = flow.encoder_proj(h).transpose(1, 2)
        cond = torch.zeros_like(mu) if cond is None else cond
        # The noise is read where the stock reads it: at the estimator's cached length.
        used = plan.est_rows
        x = self.noise[:, :, used:used + plan.frames].to(mu.dtype)
        att = store["t2w.estimator.att"][:used + plan.frames]  # [rows, steps, depth, 2, heads, 2d]
        views = [_rows_on_axis_3(att[:, s]) for s in range(self.steps)]
        x = flow.decoder.solve_chunk(x, mu, self.spk, cond, self.steps, store["t2w.estimator.cnn"], views, used)
        self._retain(plan, inputs)
        return x

    def _retain(self, plan: FlowPlan, inputs: FlowInputs) -> None:
        """The plan's retention (engine.token2wav.chunk_plan.plan_flow), in place."""
        if inputs.kept is not None:
            att = self.store["t2w.estimator.att"]
            att[:inputs.kept.shape[0]] = att[inputs.kept]  # a gather: a copy, never aliased
        if plan.enc_trim:
            att, depth = self.store["t2w.encoder.att"], len(self.flow.encoder.encoders)
            keep, tail, up = self.prompt_frames, RETAINED_FRAMES, self.flow.up_rate
            tokens, kept = plan.enc_tokens + plan.fresh, keep // up
            att[kept:kept + tail // up, :depth] = att[tokens - tail // up:tokens, :depth].clone()
            att[keep:keep + tail, depth:] = att[up * tokens - tail:up * tokens, depth:].clone()


def _rows_on_axis_3(rows: torch.Tensor) -> torch.Tensor:
    """Attention rows stored entry-major [rows, layers, batch, heads, 2d], as the modules take
    them: (layers, batch, heads, rows, 2d) (a view: writes land in the store)."""
    return rows.permute(1, 2, 3, 0, 4)
