"""The flow-matching decoder of Step-Audio2's token2wav: speech tokens -> 80-band mel.

Tokens are embedded, encoded by the upsampling conformer (two mel frames per token, three tokens of
lookahead), projected to the mel width and used as the condition `mu` of a conditional flow:
starting from noise, a fixed number of Euler steps along a cosine schedule follow the DiT
estimator's velocity, with classifier-free guidance (the estimator runs on a doubled batch,
conditioned and unconditioned, and the two are mixed by `cfg_rate`). Streaming keeps, per Euler
step, the estimator's attention and convolution caches, and the conformer's caches: a chunk attends
to the voice prompt and everything since. Parameter names equal the official `flow.pt` keys. The
noise is a fixed table drawn once (`new_noise`), read at the chunk's position in the stream, as the
stock decoder reads the table it draws at construction: the same table gives the same mel, and a
table from a seeded generator makes runs reproducible.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .dit import DiT
from .encoder import UpsampleConformerEncoder
from .token2wav_config import FlowConfig

NOISE_FRAMES = 50 * 600
"""Mel frames the noise table covers (ten minutes at 50 frames a second)."""


class CausalCFM(nn.Module):
    """Conditional flow matching with an Euler solver and classifier-free guidance."""

    def __init__(self, cfg: FlowConfig):
        super().__init__()
        self.estimator = DiT(**vars(cfg.estimator))
        self.cfg_rate = cfg.inference_cfg_rate
        self.out_channels = cfg.estimator.out_channels

    @staticmethod
    def schedule(steps: int, like: torch.Tensor) -> torch.Tensor:
        """Times 0..1 of `steps` Euler steps, denser near 0 (cosine)."""
        t = torch.linspace(0, 1, steps + 1, device=like.device, dtype=like.dtype)
        return 1 - torch.cos(t * 0.5 * math.pi)

    def solve_chunk(self, x: torch.Tensor, mu: torch.Tensor, spks: torch.Tensor, cond: torch.Tensor, steps: int,
                    cnn: torch.Tensor, att: list[torch.Tensor], att_len: int) -> torch.Tensor:
        """Euler steps over a chunk: x noise [1, 80, T] -> mel. The estimator's state is placed
        by the caller and updated in place: `cnn` [steps, depth, 2, 2 * hidden, 2], and per step
        `att[s]` (depth, 2, heads, att_len + T, 2 * head_dim), the cached rows then T free ones."""
        t_span = self.schedule(steps, mu)
        t, dt = t_span[:1], t_span[1] - t_span[0]
        # Guidance: the second half of the batch sees no condition, speaker or prompt.
        mu2, spks2, cond2 = (torch.cat([v, torch.zeros_like(v)]) for v in (mu, spks, cond))
        for step in range(1, steps + 1):
            v = self.estimator.forward_chunk_into(x.repeat(2, 1, 1), mu2, t.repeat(2), spks2, cond2, cnn[step - 1],
                                                  att[step - 1], att_len)
            guided, free = v.chunk(2, dim=0)
            x = x + dt * ((1.0 + self.cfg_rate) * guided - self.cfg_rate * free)
            t = t + dt
            if step < steps:
                dt = t_span[step + 1] - t
        return x


class Flow(nn.Module):
    def __init__(self, cfg: FlowConfig):
        super().__init__()
        self.cfg = cfg
        e = cfg.encoder
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.encoder = UpsampleConformerEncoder(**vars(e))
        self.encoder_proj = nn.Linear(e.output_size, cfg.output_size)
        self.decoder = CausalCFM(cfg)
        self.pre_lookahead_len = e.pre_lookahead_len
        self.up_rate = e.up_stride

    def speaker(self, embedding: torch.Tensor) -> torch.Tensor:
        """The speaker embedding [1, 192] (a CAM++ x-vector) projected to the mel width."""
        return self.spk_embed_affine_layer(F.normalize(embedding, dim=1))


def new_noise(out_channels: int, generator: torch.Generator | None = None, device=None,
              dtype=torch.float32) -> torch.Tensor:
    """The flow's noise table [1, out_channels, NOISE_FRAMES]."""
    return torch.randn(1, out_channels, NOISE_FRAMES, generator=generator, device=device, dtype=dtype)
