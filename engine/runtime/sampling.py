"""Seeded on-device sampling that CUDA graphs can replay: no generator state, no host sync.

Gumbel-max: argmax(logits / temperature + g) with g = -log(-log(u)) draws exactly from
softmax(logits / temperature); top-k masks every logit below the k-th largest first,
which is the reference's top-k sampling (softmax, keep the k most likely, renormalize).
The uniforms u come from an integer hash of (seed, step, stream, vocabulary index), so
the same seed and counters draw the same tokens eagerly, in a replayed graph, on CPU and
on CUDA. The step counter lives in a device tensor that the caller advances once per
frame; every sampling call within a frame uses its own stream index.

The hash works on 32-bit values held in int64 and multiplies in 16-bit halves, so no
intermediate exceeds 2**49: integer results are identical on every device. The Gumbel
noise is computed in float64; CPU and CUDA logarithms may differ in the last bit, which
could flip a draw only between candidates whose scores agree to ~1e-16.
"""
from __future__ import annotations

import dataclasses

import torch

from ..state import Region

_MASK32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    temperature: float  # <= 0: greedy
    top_k: int = 0  # 0: the whole vocabulary


def rng_region(name: str) -> Region:
    """The sampler's streaming state: int64 [seed, step], a fixed region like any counter."""
    return Region(name, (2,), torch.int64)


def seed_rng(rng: torch.Tensor, seed: int) -> None:
    rng.copy_(torch.tensor([seed & 0x7FFFFFFFFFFFFFFF, 0], dtype=torch.int64))


def advance_rng(rng: torch.Tensor, steps: int = 1) -> None:
    rng[1:].add_(steps)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    # "lowbias32" (C. Wellons' hash prospector): full avalanche on 32 bits.
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniforms(rng: torch.Tensor, stream: torch.Tensor, vocab: int) -> torch.Tensor:
    """float64 [len(stream), vocab] in (0, 1), a pure function of (seed, step, stream, index)."""
    seed, step = rng[0:1], rng[1:2]
    h = _mix32(seed & _MASK32)
    h = _mix32(h ^ ((seed >> 32) & _MASK32))
    h = _mix32(h ^ (step & _MASK32))
    h = _mix32(h ^ ((step >> 32) & _MASK32))
    h = _mix32(h.view(1, 1) ^ (stream.view(-1, 1) & _MASK32))
    index = torch.arange(vocab, device=rng.device, dtype=torch.int64)
    h = _mix32(h ^ _mix32(index + 1).view(1, -1))
    return (h.double() + 0.5) / 2.0 ** 32


def sample(logits: torch.Tensor, cfg: SamplingConfig, rng: torch.Tensor, stream: int) -> torch.Tensor:
    """logits [S, V] (or [V]) -> int64 tokens [S] (or []); row r draws with stream index
    `stream + r`. `rng` is the int64 [seed, step] tensor on logits' device."""
    rows = logits.reshape(-1, logits.shape[-1])
    if cfg.temperature <= 0:
        tokens = rows.argmax(dim=-1)
    else:
        scores = rows.double() / cfg.temperature
        if 0 < cfg.top_k < rows.shape[-1]:
            kth = torch.topk(rows, cfg.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(rows < kth, float("-inf"))
        streams = stream + torch.arange(rows.shape[0], device=rows.device)
        gumbel = -torch.log(-torch.log(uniforms(rng, streams, rows.shape[-1])))
        tokens = (scores + gumbel).argmax(dim=-1)
    return tokens.reshape(logits.shape[:-1])
