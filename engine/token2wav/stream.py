"""Streaming token2wav: chunks of speech tokens in, audio out, with the official retention.

A stream starts from a voice prompt (its speech tokens, its speaker embedding and its mel):
the prompt runs through the flow once to fill the caches. Each later chunk carries fresh
tokens plus `pre_lookahead_len` (3) tokens of lookahead that the next chunk repeats; the
last chunk carries none and flushes. After every chunk the caches keep the voice prompt and
the last RETAINED_FRAMES mel frames (the stock Token2wav's policy: attention reaches the
prompt and the recent past, so memory and time per chunk stay bounded in a long stream).
The vocoder runs on each chunk's fresh mel with its own bounded history.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..checkpoint import read_safetensors
from ..options import RuntimeOptions
from ..runtime.placement import new_store
from ..state import Region
from .flow import Flow
from .vocoder import StreamingVocoder

RETAINED_FRAMES = 100
"""Mel frames of history the caches keep beyond the voice prompt."""


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A voice prompt, prepared: speech tokens [1, Tp] (int), the speaker's CAM++ embedding
    [1, 192] and the prompt's 80-band mel [1, 2 * Tp, 80] (24 kHz, 480-sample hop)."""
    tokens: torch.Tensor
    speaker: torch.Tensor
    mel: torch.Tensor

    @classmethod
    def read(cls, path: str | Path, device: str | torch.device = "cpu") -> Prompt:
        """A prepared prompt saved as safetensors: `tokens` [Tp] or [1, Tp] (int), `speaker`
        [192] or [1, 192], `mel` [2 Tp, 80] or [1, 2 Tp, 80]."""
        tensors = read_safetensors(path)
        missing = [k for k in ("tokens", "speaker", "mel") if k not in tensors]
        if missing:
            raise ValueError(f"{path}: a prepared prompt needs tensors tokens, speaker and mel; missing {missing}")
        prompt = cls(*(tensors[k].to(device).reshape(1, *tensors[k].shape[-(2 if k == "mel" else 1):])
                       for k in ("tokens", "speaker", "mel")))
        try:
            prompt.check()
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        return prompt

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Prompt:
        """On `device`, the embedding and mel in `dtype` (the flow's)."""
        return Prompt(self.tokens.to(device), self.speaker.to(device, dtype), self.mel.to(device, dtype))

    def check(self, up_rate: int = 2) -> None:
        if self.tokens.dim() != 2 or self.tokens.shape[0] != 1 or self.tokens.is_floating_point():
            raise ValueError(f"prompt tokens must be int [1, T], got {tuple(self.tokens.shape)} {self.tokens.dtype}")
        if tuple(self.speaker.shape) != (1, 192):
            raise ValueError(f"prompt speaker embedding must be [1, 192], got {tuple(self.speaker.shape)}")
        frames = self.tokens.shape[1] * up_rate
        if self.mel.dim() != 3 or tuple(self.mel.shape[::2]) != (1, 80) or self.mel.shape[1] != frames:
            raise ValueError(f"prompt mel must be [1, {frames}, 80] ({up_rate} frames per prompt token), "
                             f"got {tuple(self.mel.shape)}")


class FlowStream:
    """The flow's side of a stream: prompt caches, then one chunk of mel per call.

    Its caches are declared regions (`regions`) in a store the caller places: the conformer's
    and every Euler step's estimator attention rows on the `mel` clock (one entry per mel
    frame, up to the prompt, the retained frames and one chunk), their convolution tails
    fixed. Rows are kept in arrival order and written in place; each call reads views of
    exactly the rows in use, never a row a demand-sized store has not backed, and trimming
    moves the kept rows down within the same memory.
    """

    def __init__(self, flow: Flow, noise: torch.Tensor, prompt: Prompt, steps: int, store,
                 max_chunk: int = 28):
        prompt.check(flow.up_rate)
        self.flow, self.noise, self.steps, self.store = flow, noise, steps, store
        self.prompt_frames = prompt.mel.shape[1]
        self.max_frames = self._chunk_frames(flow, self.prompt_frames, max_chunk)
        self.spk = flow.speaker(prompt.speaker)
        self.enc_tokens = 0  # token entries in the conformer's cache
        self.est_order: list[int] = []  # the estimator's rows in use, in the stock cache's order
        lookahead = prompt.tokens[:, :flow.pre_lookahead_len]  # the stock setup's stand-in lookahead
        self._run(torch.cat([prompt.tokens, lookahead], dim=1), last=False, cond=prompt.mel.transpose(1, 2))

    @staticmethod
    def _chunk_frames(flow: Flow, prompt_frames: int, max_chunk: int) -> int:
        """The most mel frames one call adds: a chunk, or the prompt with its stand-in lookahead."""
        return flow.up_rate * max(max_chunk, prompt_frames // flow.up_rate + flow.pre_lookahead_len)

    @staticmethod
    def regions(flow: Flow, prompt_frames: int, steps: int, max_chunk: int = 28, prefix: str = "t2w") -> list[Region]:
        """The stream's state for a prompt of `prompt_frames` mel frames, `steps` Euler steps
        and chunks of at most `max_chunk` tokens (fresh plus lookahead)."""
        enc, dit = flow.encoder, flow.decoder.estimator
        attn = enc.encoders[0].self_attn
        rows = prompt_frames + RETAINED_FRAMES + FlowStream._chunk_frames(flow, prompt_frames, max_chunk)
        dtype = flow.input_embedding.weight.dtype
        layers = len(enc.encoders) + len(enc.up_encoders)
        return [
            Region(f"{prefix}.encoder.att", (layers, 1, attn.h, 2 * attn.d_k), dtype, "mel", rows),
            Region(f"{prefix}.encoder.cnn", (1, enc.output_size(), 2 + 2 * flow.up_rate), dtype),
            Region(f"{prefix}.estimator.att", (steps, len(dit.blocks), 2, dit.num_heads, 2 * dit.head_dim), dtype,
                   "mel", rows),
            Region(f"{prefix}.estimator.cnn", (steps, len(dit.blocks), 2, 2 * dit.hidden_size, 2), dtype),
        ]

    def chunk(self, tokens: torch.Tensor, last: bool) -> torch.Tensor:
        """tokens [1, n] (n > lookahead unless last) -> mel [1, 80, frames] for the fresh tokens."""
        if tokens.shape[1] * self.flow.up_rate > self.max_frames:
            raise ValueError(f"a chunk of {tokens.shape[1]} tokens is longer than this stream's state holds "
                             f"({self.max_frames // self.flow.up_rate})")
        mel = self._run(tokens, last, cond=None)
        self._trim()
        return mel

    def _run(self, tokens, last: bool, cond) -> torch.Tensor:
        flow, store = self.flow, self.store
        fresh = tokens.shape[1] - (0 if last else flow.pre_lookahead_len)
        frames = flow.up_rate * fresh
        store.advance("mel", frames)  # before the rows are written: demand-sized rings back them first
        enc_rows = flow.up_rate * (self.enc_tokens + fresh)
        att_len = torch.tensor(self.enc_tokens, device=tokens.device)
        h = flow.encoder.forward_chunk_fixed(flow.input_embedding(tokens), last, store["t2w.encoder.cnn"],
                                             _rows_on_axis_3(store["t2w.encoder.att"][:enc_rows]), att_len)
        self.enc_tokens += fresh
        mu = flow.encoder_proj(h).transpose(1, 2)
        cond = torch.zeros_like(mu) if cond is None else cond
        # The noise is read where the stock reads it: at the estimator's cached length.
        used = len(self.est_order)
        x = self.noise[:, :, used:used + frames].to(mu.dtype)
        att = store["t2w.estimator.att"][:used + frames]  # [rows, steps, depth, 2, heads, 2d]
        views = [_rows_on_axis_3(att[:, s]) for s in range(self.steps)]
        x = flow.decoder.solve_chunk(x, mu, self.spk, cond, self.steps, store["t2w.estimator.cnn"], views, used)
        self.est_order = list(range(used, used + frames)) + self.est_order  # the stock puts new rows first
        return x

    def _trim(self) -> None:
        """The stock retention: keep the first prompt-length and the last 100 entries of each
        cache as the stock lists them. Its conformer cache lists rows oldest first (the prompt's
        rows and the newest 100 stay; token-rate layers at half rate), as they are stored here.
        Its estimator cache puts each chunk's rows before the older ones, so which rows stay
        follows that order, tracked in `est_order`; attention there has no positions, so the
        kept rows are compacted in any physical order."""
        keep, tail, up = self.prompt_frames, RETAINED_FRAMES, self.flow.up_rate
        if len(self.est_order) > keep + tail:
            kept = self.est_order[:keep] + self.est_order[-tail:]
            att = self.store["t2w.estimator.att"]
            att[:len(kept)] = att[torch.tensor(kept, device=att.device)]  # a gather: a copy, never aliased
            self.est_order = list(range(len(kept)))
        if up * self.enc_tokens > keep + tail:
            att, depth, tokens = self.store["t2w.encoder.att"], len(self.flow.encoder.encoders), self.enc_tokens
            kept = keep // up
            att[kept:kept + tail // up, :depth] = att[tokens - tail // up:tokens, :depth].clone()
            att[keep:keep + tail, depth:] = att[up * tokens - tail:up * tokens, depth:].clone()
            self.enc_tokens = kept + tail // up


def _rows_on_axis_3(rows: torch.Tensor) -> torch.Tensor:
    """Attention rows stored entry-major [rows, layers, batch, heads, 2d], as the modules take
    them: (layers, batch, heads, rows, 2d) (a view: writes land in the store)."""
    return rows.permute(1, 2, 3, 0, 4)


class Token2wavStream:
    """A whole stream: the flow's chunks through the vocoder. `push` returns the audio [1, n]
    (24 kHz, float32) that became final; the first audio of a stream that goes on starts with
    the vocoder's delay in silence, as the stock runtime plays it (so a chunk's audio lines up
    with its tokens).

    Its state is declared (`FlowStream.regions` and the vocoder's) and placed by
    `options.demand_sized_state` as a conversation's is: full size at once, or memory that
    follows the `mel` clock at stable addresses; the output is the same either way."""

    @torch.inference_mode()
    def __init__(self, model, prompt: Prompt, steps: int = 10, noise: torch.Tensor | None = None,
                 options: RuntimeOptions | None = None, max_chunk: int = 28):
        flow = model.flow
        noise = model.noise if noise is None else noise
        prompt = prompt.to(model.device, flow.input_embedding.weight.dtype)
        self.vocoder = StreamingVocoder(model.vocoder)
        regions = (FlowStream.regions(flow, prompt.mel.shape[1], steps, max_chunk)
                   + self.vocoder.regions("t2w.vocoder"))
        self.store = new_store(regions, model.device, options or RuntimeOptions())
        self.vocoder.place({name: self.store[f"t2w.vocoder.{name}"] for name in self.vocoder.state_shapes()})
        self.flow = FlowStream(flow, noise, prompt, steps, self.store, max_chunk)
        self.lookahead = flow.pre_lookahead_len
        self.silence = self.vocoder.geometry.delay * self.vocoder.hop
        self.started = False

    @torch.inference_mode()
    def push(self, tokens: torch.Tensor, last: bool = False) -> torch.Tensor:
        """tokens [1, n]: fresh tokens plus `lookahead` more (n > lookahead), or for the last
        chunk any number (0: flush the vocoder only)."""
        n = tokens.shape[-1]
        if not last and n <= self.lookahead:
            raise ValueError(f"a chunk that is not the last needs fresh tokens plus {self.lookahead} of lookahead, "
                             f"got {n}")
        if n:
            mel = self.flow.chunk(tokens.to(self.vocoder.state["mel"].device), last).float()
        else:
            mel = self.vocoder.state["mel"][:, :, :0]
        audio = self.vocoder.stream(mel, finalize=last)
        if audio.shape[-1] and not self.started:
            self.started = True
            if not last:
                audio = torch.cat([audio.new_zeros(1, self.silence), audio], dim=1)
        return audio
