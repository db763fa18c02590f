"""The DiT estimator of Step-Audio2's flow-matching decoder (CosyVoice2 `flow/decoder_dit.py`, class
`DiT`). Submodule and parameter names are the stock ones, so the official `flow.pt` (under
`decoder.estimator.`) loads unchanged.

No positional encoding at all: order enters only through the causal convolutions (kernel 3) inside
every block. So attention treats its keys as a set and a key/value cache is just rows to attend to:
their order, and dropping some (the stock Token2wav trims the cache), need no position bookkeeping.

Three entry points share one block and differ only in where keys/values and conv history come from:
- `forward`: the whole signal, with a key padding mask and zero conv history at the start.
- `forward_chunk`: the stock streaming call; caches in, new (concatenated) caches out.
- `forward_chunk_into`: the same with fixed-capacity state updated in place (stable addresses).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(q, k, v) of one chunk, each (b, heads, T, head_dim) -> attention output (b, heads, T, head_dim)."""


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class TimestepEmbedder(nn.Module):
    """Flow time t (b,) -> (b, hidden): sinusoidal features of 1000 t through a two-layer MLP."""

    FEATURES = 256
    MAX_PERIOD = 10000

    def __init__(self, hidden_size: int):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(self.FEATURES, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.FEATURES // 2
        # Frequencies in fp32 first, then cast to t's dtype: the stock's order of rounding.
        steps = torch.arange(half, dtype=torch.float32, device=t.device)
        freqs = torch.exp(-math.log(self.MAX_PERIOD) * steps / half).to(t.dtype)
        args = (t * 1000)[:, None] * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))


class Attention(nn.Module):
    """Multi-head attention with LayerNorm on queries and keys; how keys/values are gathered is the caller's."""

    def __init__(self, dim: int, num_heads: int, head_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        inner = num_heads * head_dim
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.q_norm = nn.LayerNorm(head_dim)
        self.k_norm = nn.LayerNorm(head_dim)
        self.proj = nn.Linear(inner, dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_norm(self._heads(self.to_q(x)))
        k = self.k_norm(self._heads(self.to_k(x)))
        v = self._heads(self.to_v(x))
        return self.proj(attend(q, k, v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CausalConvBlock(nn.Module):
    """Causal conv -> LayerNorm -> Mish -> causal conv over time.

    Its streaming history is each conv's last `kernel_size - 1` input frames, packed on channels as
    (b, 2 * channels, kernel_size - 1): first conv's, then second conv's (the stock cnn_cache layout).
    """

    def __init__(self, channels: int, kernel_size: int = 3):
        super().__init__()
        self.channels = channels
        self.context = kernel_size - 1
        # Keys are the stock nn.Sequential's indices (its other entries hold no weights), so that
        # `conv.block.1.weight` and friends load unchanged.
        self.block = nn.ModuleDict({
            "1": nn.Conv1d(channels, channels, kernel_size),
            "3": nn.LayerNorm(channels),
            "6": nn.Conv1d(channels, channels, kernel_size),
        })

    def _causal(self, conv: nn.Conv1d, x: torch.Tensor, history: torch.Tensor | None):
        if history is None:  # the signal's start: zero padding on the left
            history = x.new_zeros(x.shape[0], x.shape[1], self.context)
        x = torch.cat([history, x], dim=2)
        # Taken from the concatenation, not from x alone, so a chunk shorter than the context works.
        return conv(x), x[..., x.shape[2] - self.context:]

    def forward(self, x: torch.Tensor, history: torch.Tensor | None = None):
        """x (b, T, c) -> (out (b, T, c), new history); history None = start of the signal."""
        first, second = (None, None) if history is None else history.split(self.channels, dim=1)
        y, new_first = self._causal(self.block["1"], x.transpose(1, 2), first)
        y = F.mish(self.block["3"](y.transpose(1, 2)))
        y, new_second = self._causal(self.block["6"], y.transpose(1, 2), second)
        return y.transpose(1, 2), torch.cat([new_first, new_second], dim=1)


class DiTBlock(nn.Module):
    """Attention, causal conv and MLP branches, each with adaLN-Zero modulation by the time embedding."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int, mlp_ratio: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads, head_dim)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.mlp = MLP(hidden_size, int(hidden_size * mlp_ratio))
        self.norm3 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.conv = CausalConvBlock(hidden_size)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 9 * hidden_size))

    def forward(self, x: torch.Tensor, c: torch.Tensor, attend: Attend, conv_history: torch.Tensor | None):
        """x (b, T, d), c (b, 1, d) -> (x, new conv history)."""
        (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp,
         shift_conv, scale_conv, gate_conv) = self.adaLN_modulation(c).chunk(9, dim=-1)
        # Branch order (attention, conv, MLP) and the norms they use are the stock's.
        x = x + gate_msa * self.attn(modulate(self.norm1(x), shift_msa, scale_msa), attend)
        y, conv_history = self.conv(modulate(self.norm3(x), shift_conv, scale_conv), conv_history)
        x = x + gate_conv * y
        x = x + gate_mlp * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x, conv_history


class FinalLayer(nn.Module):
    def __init__(self, hidden_size: int, out_channels: int):
        super().__init__()
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, out_channels)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


def _attend_masked(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _attend_concat(cache: torch.Tensor | None, new_caches: list, q, k, v) -> torch.Tensor:
    """Stock streaming attention: unmasked over this chunk's rows followed by the cached ones.

    New rows go first, as in the stock cache; the new cache (k and v on the last axis) is appended to
    `new_caches`.
    """
    if cache is not None:
        k_cache, v_cache = cache.chunk(2, dim=-1)
        k = torch.cat([k, k_cache], dim=2)
        v = torch.cat([v, v_cache], dim=2)
    new_caches.append(torch.cat([k, v], dim=-1))
    return F.scaled_dot_product_attention(q, k, v)


def _attend_into(state: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor, q, k, v) -> torch.Tensor:
    """Write this chunk's k/v at `rows` of the fixed-capacity `state` (b, heads, capacity, 2 head_dim),
    then attend over the whole capacity with the rows not in use masked out (fixed shapes, no sync)."""
    state.index_copy_(2, rows, torch.cat([k, v], dim=-1).to(state.dtype))
    k_all, v_all = state.chunk(2, dim=-1)
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=valid)


class DiT(nn.Module):
    """Velocity estimator v(x, t | mu, spks, cond); the defaults are the official Step-Audio2 numbers.

    Inputs x, mu, cond are (b, mel, T) and spks (b, mel); `in_channels` counts them stacked on channels.
    """

    def __init__(self, in_channels: int = 320, out_channels: int = 80, mlp_ratio: float = 4.0, depth: int = 16,
                 num_heads: int = 8, head_dim: int = 64, hidden_size: int = 512):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.hidden_size = hidden_size
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.in_proj = nn.Linear(in_channels, hidden_size)
        self.blocks = nn.ModuleList(DiTBlock(hidden_size, num_heads, head_dim, mlp_ratio) for _ in range(depth))
        self.final_layer = FinalLayer(hidden_size, out_channels)

    @staticmethod
    def _stack_inputs(x, mu, spks, cond) -> torch.Tensor:
        parts = [x, mu]
        if spks is not None:  # one speaker vector, repeated over every frame
            parts.append(spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        if cond is not None:
            parts.append(cond)
        return torch.cat(parts, dim=1)

    def _run(self, x, mu, t, spks, cond, attends: list[Attend], conv_histories: list):
        """The network over one chunk -> (out (b, out_channels, T), each block's new conv history)."""
        c = self.t_embedder(t).unsqueeze(1)
        h = self.in_proj(self._stack_inputs(x, mu, spks, cond).transpose(1, 2))
        new_histories = []
        for block, attend, history in zip(self.blocks, attends, conv_histories):
            h, history = block(h, c, attend, history)
            new_histories.append(history)
        return self.final_layer(h, c).transpose(1, 2), new_histories

    def forward(self, x, mask, mu, t, spks=None, cond=None) -> torch.Tensor:
        """The whole signal: x, mu, cond (b, mel, T), mask (b, 1, T), t (b,), spks (b, mel) -> (b, out, T).

        The mask only hides padded keys from attention; as in the stock, padded frames still feed the
        causal convolutions and get outputs of their own.
        """
        attend = partial(_attend_masked, mask.bool().unsqueeze(1))  # (b, 1, 1, T): every head and query
        depth = len(self.blocks)
        out, _ = self._run(x, mu, t, spks, cond, [attend] * depth, [None] * depth)
        return out

    def forward_chunk(self, x, mu, t, spks, cond, cnn_cache=None, att_cache=None):
        """One streaming chunk, as the stock: -> (out, new_cnn_cache, new_att_cache), all fresh tensors.

        cnn_cache (depth, b, 2 * hidden, 2): each block's conv history; None at the start of the signal.
        att_cache (depth, b, heads, L, 2 * head_dim): keys then values on the last axis, for any L
        (trimmed or not); None = empty. The new one is (depth, b, heads, T + L, 2 * head_dim) with this
        chunk's T rows first, then the given L rows.
        """
        depth = len(self.blocks)
        histories = [None] * depth if cnn_cache is None else list(cnn_cache.unbind(0))
        caches = [None] * depth if att_cache is None else list(att_cache.unbind(0))
        new_caches: list[torch.Tensor] = []
        attends = [partial(_attend_concat, cache, new_caches) for cache in caches]
        out, new_histories = self._run(x, mu, t, spks, cond, attends, histories)
        return out, torch.stack(new_histories), torch.stack(new_caches)

    def forward_chunk_into(self, x, mu, t, spks, cond, cnn_state: torch.Tensor, att_state: torch.Tensor,
                           att_len: int | torch.Tensor) -> torch.Tensor:
        """`forward_chunk` on preallocated state, updated in place; returns only the output (b, out, T).

        cnn_state (depth, b, 2 * hidden, 2): the cnn_cache layout, zeros at the start of the signal;
        overwritten with the new history.
        att_state (depth, b, heads, capacity, 2 * head_dim): rows [0, att_len) are the cache (in any
        order: attention has no positions); this chunk's T rows are written at [att_len, att_len + T),
        and the caller then advances att_len by T. att_len may be an int or a 0-dim integer tensor on the
        state's device (nothing here reads it on the host). Rows past att_len + T are masked out but
        still multiplied by zero weights, so they must hold finite numbers (allocate with zeros).
        """
        capacity = att_state.shape[3]
        chunk = x.shape[-1]
        if isinstance(att_len, int) and att_len + chunk > capacity:
            raise ValueError(f"attention state holds {capacity} rows, needs {att_len + chunk}")
        rows = torch.arange(chunk, device=att_state.device) + att_len
        valid = (torch.arange(capacity, device=att_state.device) < att_len + chunk).view(1, 1, 1, capacity)
        attends = [partial(_attend_into, state, rows, valid) for state in att_state.unbind(0)]
        out, new_histories = self._run(x, mu, t, spks, cond, attends, list(cnn_state.unbind(0)))
        for state, history in zip(cnn_state.unbind(0), new_histories):
            state.copy_(history)
        return out
