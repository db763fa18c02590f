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
from .flow import Flow
from .vocoder import StreamingVocoder, stream_geometry

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
    """The flow's side of a stream: prompt caches, then one chunk of mel per call."""

    def __init__(self, flow: Flow, noise: torch.Tensor, prompt: Prompt, steps: int):
        prompt.check(flow.up_rate)
        self.flow, self.noise, self.steps = flow, noise, steps
        self.prompt_frames = prompt.mel.shape[1]
        self.spk = flow.speaker(prompt.speaker)
        lookahead = prompt.tokens[:, :flow.pre_lookahead_len]  # the stock setup's stand-in lookahead
        tokens = torch.cat([prompt.tokens, lookahead], dim=1)
        self._run(tokens, last=False, cond=prompt.mel.transpose(1, 2), first=True)

    def chunk(self, tokens: torch.Tensor, last: bool) -> torch.Tensor:
        """tokens [1, n] (n > lookahead unless last) -> mel [1, 80, frames] for the fresh tokens."""
        mel = self._run(tokens, last, cond=None, first=False)
        self._trim()
        return mel

    def _run(self, tokens, last: bool, cond, first: bool) -> torch.Tensor:
        flow = self.flow
        x = flow.input_embedding(tokens)
        h, cnn, att = flow.encoder.forward_chunk(x, last, None if first else self.enc_cnn,
                                                 None if first else self.enc_att)
        self.enc_cnn, self.enc_att = cnn, att
        mu = flow.encoder_proj(h).transpose(1, 2)
        cond = torch.zeros_like(mu) if cond is None else cond
        offset = 0 if first else self.est[0][1].shape[3]  # frames the estimator has cached
        noise = self.noise[:, :, offset:offset + mu.shape[2]].to(mu.dtype)
        mel, self.est = flow.decoder.solve_chunk(noise, mu, self.spk, cond, self.steps, None if first else self.est)
        return mel

    def _trim(self) -> None:
        keep, tail = self.prompt_frames, RETAINED_FRAMES
        if self.est[0][1].shape[3] > keep + tail:
            self.est = [(cnn, torch.cat([att[:, :, :, :keep], att[:, :, :, -tail:]], dim=3)) for cnn, att in self.est]
        att = self.enc_att
        if att.shape[3] > keep + tail:
            # Token-rate layers hold half as many entries, stored twice over (as [cache, cache]);
            # the upsampled layers hold mel-rate entries. Each is trimmed at its own rate.
            depth = len(self.flow.encoder.encoders)
            tokens = att[:depth, :, :, :att.shape[3] // 2]
            tokens = torch.cat([tokens[:, :, :, :keep // 2], tokens[:, :, :, tokens.shape[3] - tail // 2:]], dim=3)
            mels = torch.cat([att[depth:, :, :, :keep], att[depth:, :, :, att.shape[3] - tail:]], dim=3)
            self.enc_att = torch.cat([tokens.repeat(1, 1, 1, 2, 1), mels], dim=0)


class Token2wavStream:
    """A whole stream: the flow's chunks through the vocoder. `push` returns the audio [1, n]
    (24 kHz, float32) that became final; the first audio of a stream that goes on starts with
    the vocoder's delay in silence, as the stock runtime plays it (so a chunk's audio lines up
    with its tokens)."""

    def __init__(self, model, prompt: Prompt, steps: int = 10, noise: torch.Tensor | None = None):
        flow = model.flow
        noise = model.noise if noise is None else noise
        self.flow = FlowStream(flow, noise, prompt.to(model.device, flow.input_embedding.weight.dtype), steps)
        self.vocoder = StreamingVocoder(model.vocoder)
        self.lookahead = flow.pre_lookahead_len
        self.silence = stream_geometry(model.vocoder).delay * self.vocoder.hop
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
