"""Building blocks of the Step-Audio2 flow encoder (assembled in encoder.py).

Parameter and submodule names are the stock CosyVoice2 ones, so the official flow.pt loads as is.
Inference only: the stock dropouts are identities in eval mode and are left out.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def relative_sinusoids(n: int, d_model: int) -> torch.Tensor:
    """(2n-1, d_model) float32 sinusoids of the relative positions n-1, n-2, ..., -(n-1), one per row.

    Descending like ESPnet's table, so that row n-1 is position 0. A negative position is computed as
    (-p) * w, which is bit for bit the stock's -1 * p * w: the official weights saw exactly these values.
    """
    position = torch.arange(n - 1, -n, -1, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    angle = position * inv_freq
    table = torch.empty(2 * n - 1, d_model)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table


def relative_index(n_query: int, n_key: int, first: int | torch.Tensor, device: torch.device) -> torch.Tensor:
    """(n_query, n_key) int64: row `first - a + b` of a descending position table for query a and key b.

    With `first` the row of query 0 against key 0, every pair gets the row of its own distance; clamped
    to the n_query + n_key - 1 rows given to the attention (rows out of range only serve masked keys).
    """
    query = torch.arange(n_query, device=device).unsqueeze(1)
    key = torch.arange(n_key, device=device)
    return (first - query + key).clamp(0, n_query + n_key - 2)


class InputLayer(nn.Module):
    """Linear + LayerNorm, times sqrt(d): the stock `LinearNoSubsampling` with its positional-encoding scale."""

    def __init__(self, idim: int, odim: int):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5))
        self.xscale = math.sqrt(odim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) * self.xscale


class PreLookahead(nn.Module):
    """Residual conv pair: conv1 sees `lookahead` future tokens, conv2 two past conv1 outputs."""

    def __init__(self, channels: int, lookahead: int):
        super().__init__()
        self.lookahead = lookahead
        self.conv1 = nn.Conv1d(channels, channels, kernel_size=lookahead + 1)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C), its last `lookahead` tokens being future context only; cache (B, C, 2): the conv1
        outputs before x (zeros at the start). Returns (B, T - lookahead, C) and the new cache."""
        h = F.leaky_relu(self.conv1(x.transpose(1, 2).contiguous()))
        h = torch.cat([cache, h], dim=2)
        # Taken after the concatenation so that a 1-token chunk still leaves 2 frames (the stock keeps
        # only that chunk's outputs, a cache its next call then refuses).
        tail = h[:, :, h.shape[2] - 2:]
        out = self.conv2(h).transpose(1, 2).contiguous()
        return out + x[:, : x.shape[1] - self.lookahead], tail


class Upsample(nn.Module):
    """Nearest-neighbour repeat by `stride`, then a causal conv over 2*stride + 1 repeated frames."""

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, kernel_size=2 * stride + 1)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, C, T) -> (B, C, stride*T); cache (B, C, 2*stride): the repeated frames before x (zeros
        at the start). Also returns the new cache."""
        b, c, t = x.shape
        # expand + reshape rather than repeat_interleave, which may size its output on the host
        repeated = x.unsqueeze(3).expand(b, c, t, self.stride).reshape(b, c, t * self.stride)
        h = torch.cat([cache, repeated], dim=2)
        return self.conv(h), h[:, :, h.shape[2] - 2 * self.stride:]


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (ESPnet's `rel_selfattn`)."""

    def __init__(self, n_head: int, n_feat: int, key_bias: bool = True):
        super().__init__()
        self.h = n_head
        self.d_k = n_feat // n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=key_bias)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(n_head, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(n_head, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, rel: torch.Tensor, key_mask: torch.Tensor | None = None,
                cache: torch.Tensor | None = None,
                write_at: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) attends to the cached keys followed by its own.

        pos: (W, D) sinusoids of descending relative positions; rel: (T, Tk) the row of `pos` for each
        query/key pair; key_mask: broadcastable to (B, 1, T, Tk), True where a key may be attended.
        cache (B, H, Tc, 2*d_k), keys then values: without `write_at` it is prepended to x's and the
        result returned as the new cache; with `write_at` (T time indices) it is a fixed-capacity
        buffer that x's keys and values are written into in place, all Tk = Tc slots then attended to.
        """
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        kv = torch.cat([k, v], dim=-1)
        if write_at is not None:
            kv = cache.index_copy_(2, write_at, kv)
        elif cache is not None:
            kv = torch.cat([cache, kv], dim=2)
        k, v = kv.split(self.d_k, dim=-1)
        p = self.linear_pos(pos).view(1, -1, self.h, self.d_k).transpose(1, 2)
        content = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        position = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        # Picks each pair's distance out of (T, W) scores: the stock's rel_shift, for any cache length.
        position = position.gather(-1, rel.expand(b, self.h, -1, -1))
        scores = (content + position) / math.sqrt(self.d_k)
        if key_mask is None:
            attn = torch.softmax(scores, dim=-1)
        else:
            # Zeroed again after the softmax so that a query with no key at all gets 0, not NaN.
            attn = torch.softmax(scores.masked_fill(~key_mask, -math.inf), dim=-1).masked_fill(~key_mask, 0.0)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, t, -1)
        return self.linear_out(out), kv


class FeedForward(nn.Module):
    """Position-wise Linear, SiLU, Linear."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Linear(size, hidden)
        self.w_2 = nn.Linear(hidden, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """The stock `ConformerEncoderLayer` as the flow encoder builds it: self-attention and one feed-forward,
    no macaron feed-forward and no convolution module."""

    def __init__(self, size: int, n_head: int, linear_units: int, key_bias: bool = True,
                 normalize_before: bool = True):
        super().__init__()
        self.self_attn = RelPositionAttention(n_head, size, key_bias)
        self.feed_forward = FeedForward(size, linear_units)
        self.norm_ff = nn.LayerNorm(size, eps=1e-12)
        self.norm_mha = nn.LayerNorm(size, eps=1e-12)
        self.normalize_before = normalize_before

    def forward(self, x: torch.Tensor, pos: torch.Tensor, rel: torch.Tensor, key_mask: torch.Tensor | None = None,
                cache: torch.Tensor | None = None,
                write_at: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) -> (B, T, D) and the attention's keys|values (see RelPositionAttention)."""
        pre = self.normalize_before
        h, kv = self.self_attn(self.norm_mha(x) if pre else x, pos, rel, key_mask, cache, write_at)
        x = x + h
        if not pre:
            x = self.norm_mha(x)
        x = x + self.feed_forward(self.norm_ff(x) if pre else x)
        if not pre:
            x = self.norm_ff(x)
        return x, kv
