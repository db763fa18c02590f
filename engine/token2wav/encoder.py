"""The upsampling conformer encoder of Step-Audio2's flow (stock `UpsampleConformerEncoderV2`).
Token embeddings (25 Hz) pass a linear input layer, a pre-lookahead conv (3 tokens of lookahead),
`num_blocks` conformer layers, a x2 upsampling conv to the mel rate (50 Hz), a second input layer
and `num_up_blocks` more layers; attention is full (no chunk mask), ESPnet relative positions.
`forward_chunk` streams with the stock cache layouts, so a cache moves between stock and ours. The
cnn cache (B, D, 2 + 2*stride) holds each conv's left context (zeros before the first chunk): [:2]
the last two pre-lookahead conv1 outputs, [2:] the last 2*stride upsampled frames. The attention
cache (num_blocks + num_up_blocks, B, H, 2L, 2*d_k), keys then values on the last axis: token-rate
layers hold their L frames twice, so all share the mel-rate 2L axis (L derived from it, as stock).
Positions are within the keys given (query a at L + a, key b at b), so a trimmed cache (Token2wav
keeps the prompt and the last 100 frames) sees the prompt closer, exactly as the stock runs it.
`forward_chunk_fixed`: the same step in place on preallocated caches (fixed shapes, no read-back).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .encoder_layers import ConformerLayer, InputLayer, PreLookahead, Upsample, relative_index, relative_sinusoids

CONV2_CONTEXT = 2  # left context of the pre-lookahead conv2 (kernel 3), the head of the cnn cache


class UpsampleConformerEncoder(nn.Module):
    """Tokens (B, T, input_size) -> mel-rate features (B, up_stride*T', output_size); defaults are official."""

    def __init__(self, input_size: int = 512, output_size: int = 512, attention_heads: int = 8,
                 linear_units: int = 2048, num_blocks: int = 6, num_up_blocks: int = 4, pre_lookahead_len: int = 3,
                 up_stride: int = 2, up_scale_factor: float = 2, key_bias: bool = True,
                 normalize_before: bool = True, max_len: int = 5000):
        super().__init__()
        if up_scale_factor != up_stride:
            raise ValueError(f"up_scale_factor {up_scale_factor} must equal up_stride {up_stride}")
        self.normalize_before = normalize_before
        self.lookahead = pre_lookahead_len
        self.stride = up_stride
        self.embed = InputLayer(input_size, output_size)
        self.after_norm = nn.LayerNorm(output_size, eps=1e-5)
        self.pre_lookahead_layer = PreLookahead(output_size, pre_lookahead_len)
        self.encoders = nn.ModuleList(
            ConformerLayer(output_size, attention_heads, linear_units, key_bias, normalize_before)
            for _ in range(num_blocks))
        self.up_layer = Upsample(output_size, up_stride)
        # The stock sizes this layer by input_size although it reads output_size features; kept for
        # the checkpoint's shapes (both are 512).
        self.up_embed = InputLayer(input_size, output_size)
        self.up_encoders = nn.ModuleList(
            ConformerLayer(output_size, attention_heads, linear_units, key_bias, normalize_before)
            for _ in range(num_up_blocks))
        # Not in the checkpoint: a function of the sizes, like the stock's table (grown on demand).
        self.register_buffer("pe", relative_sinusoids(max_len, output_size), persistent=False)

    def output_size(self) -> int:
        return self.after_norm.normalized_shape[0]

    # ---- whole signal -------------------------------------------------------------------------------------

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """xs (B, T, input_size) with valid lengths xs_lens (B,) -> (B, stride*T, D) and its validity mask
        (B, 1, stride*T). Padding is only masked out of the attention keys, as in the stock."""
        x = F.pad(self.embed(xs), (0, 0, 0, self.lookahead))
        x, _ = self.pre_lookahead_layer(x, self._zeros(x, CONV2_CONTEXT))
        x = self._whole(self.encoders, x, xs_lens)
        x, _ = self.up_layer(x.transpose(1, 2).contiguous(), self._zeros(x, 2 * self.stride))
        lens = xs_lens * self.stride
        x = self._whole(self.up_encoders, self.up_embed(x.transpose(1, 2).contiguous()), lens)
        return self._out(x), self._valid(lens, x.shape[1]).unsqueeze(1)

    # ---- streaming, stock cache layout --------------------------------------------------------------------

    def forward_chunk(self, xs: torch.Tensor, last_chunk: bool = False, cnn_cache: torch.Tensor | None = None,
                      att_cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One streaming step; returns (h, new_cnn_cache, new_att_cache) in the layouts of the module doc.

        xs (B, T, input_size): the new tokens followed by `pre_lookahead_len` lookahead tokens, which are
        only looked at (the caller sends them again at the head of the next chunk), so h covers T - 3
        tokens: (B, stride*(T-3), D). On the last chunk (last_chunk=True) there is no future, zeros stand
        in for it and h covers all T tokens. Caches None: the start of a stream (e.g. the prompt).
        """
        self._check_chunk_caches(cnn_cache, att_cache)
        n1 = len(self.encoders)
        if cnn_cache is None:
            cnn_cache = self._zeros(xs, CONV2_CONTEXT + 2 * self.stride, self.output_size())
        past = 0 if att_cache is None else att_cache.shape[3] // 2
        token_caches = [None] * n1 if att_cache is None else att_cache[:n1, :, :, :past]
        mel_caches = [None] * len(self.up_encoders) if att_cache is None else att_cache[n1:]

        x, new_cnn1 = self.pre_lookahead_layer(self._chunk_input(xs, last_chunk), cnn_cache[:, :, :CONV2_CONTEXT])
        x, token_kv = self._chunk(self.encoders, x, token_caches, past)
        x, new_cnn2 = self.up_layer(x.transpose(1, 2).contiguous(), cnn_cache[:, :, CONV2_CONTEXT:])
        x = self.up_embed(x.transpose(1, 2).contiguous())
        x, mel_kv = self._chunk(self.up_encoders, x, mel_caches, self.stride * past)

        new_att = torch.cat([torch.stack(token_kv).repeat(1, 1, 1, 2, 1), torch.stack(mel_kv)], dim=0)
        return self._out(x), torch.cat([new_cnn1, new_cnn2], dim=2), new_att

    # ---- streaming, fixed-capacity caches written in place ------------------------------------------------

    def forward_chunk_fixed(self, xs: torch.Tensor, last_chunk: bool, cnn_cache: torch.Tensor,
                            att_cache: torch.Tensor, att_len: torch.Tensor) -> torch.Tensor:
        """`forward_chunk` on preallocated caches that stay at their addresses; returns h only.

        cnn_cache (B, D, 2 + 2*stride): the stock layout, overwritten with the new one.
        att_cache (num_blocks + num_up_blocks, B, H, capacity, 2*d_k), zero-initialised (masked slots are
        still multiplied by 0): token-rate layers keep their att_len valid frames in [0, att_len) and use
        the first capacity // stride slots, upsampled layers keep stride * att_len frames. A stock cache
        copied into [:, :, :, :2L] is valid with att_len = L (the token layers' second copy is ignored).
        att_len: integer tensor, 0-d or (1,), on the cache's device; only read, so that no value ever
        travels to the host. This chunk's keys and values go right after the valid frames; the caller
        then adds h.shape[1] // stride to att_len, and trims by moving frames down and lowering att_len.
        Capacity must hold stride * (att_len + that count) frames: it is not checked (no host read).
        """
        self._check_stride()
        n1 = len(self.encoders)
        cap = att_cache.shape[3]
        x, tail = self.pre_lookahead_layer(self._chunk_input(xs, last_chunk), cnn_cache[:, :, :CONV2_CONTEXT])
        cnn_cache[:, :, :CONV2_CONTEXT].copy_(tail)
        x = self._fixed(self.encoders, x, att_cache[:n1, :, :, : cap // self.stride], att_len)
        x, tail = self.up_layer(x.transpose(1, 2).contiguous(), cnn_cache[:, :, CONV2_CONTEXT:])
        cnn_cache[:, :, CONV2_CONTEXT:].copy_(tail)
        x = self.up_embed(x.transpose(1, 2).contiguous())
        x = self._fixed(self.up_encoders, x, att_cache[n1:], self.stride * att_len)
        return self._out(x)

    def new_fixed_caches(self, batch: int, capacity: int, dtype: torch.dtype | None = None,
                         device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Zeroed (cnn_cache, att_cache, att_len) for `forward_chunk_fixed`; capacity in mel-rate frames."""
        ref = self.after_norm.weight
        dtype, device = dtype or ref.dtype, device or ref.device
        attn = self.encoders[0].self_attn if len(self.encoders) else self.up_encoders[0].self_attn
        layers = len(self.encoders) + len(self.up_encoders)
        cnn = torch.zeros(batch, self.output_size(), CONV2_CONTEXT + 2 * self.stride, dtype=dtype, device=device)
        att = torch.zeros(layers, batch, attn.h, capacity, 2 * attn.d_k, dtype=dtype, device=device)
        return cnn, att, torch.zeros((), dtype=torch.long, device=device)

    # ---- helpers ------------------------------------------------------------------------------------------

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        return self.after_norm(x) if self.normalize_before else x

    @staticmethod
    def _zeros(like: torch.Tensor, frames: int, channels: int | None = None) -> torch.Tensor:
        channels = like.shape[2] if channels is None else channels
        return like.new_zeros(like.shape[0], channels, frames)

    @staticmethod
    def _valid(lens: torch.Tensor, frames: int) -> torch.Tensor:
        return torch.arange(frames, device=lens.device) < lens.unsqueeze(1)

    def _chunk_input(self, xs: torch.Tensor, last_chunk: bool) -> torch.Tensor:
        x = self.embed(xs)
        # The last chunk has no lookahead tokens: zeros (after the input layer) stand in for them, as the
        # whole-signal forward pads.
        return F.pad(x, (0, 0, 0, self.lookahead)) if last_chunk else x

    def _positions(self, newest: int, n_query: int) -> torch.Tensor:
        """Sinusoid rows of the relative positions newest, newest - 1, ..., -(n_query - 1)."""
        center = self.pe.shape[0] // 2
        if max(newest, n_query - 1) > center:
            self.pe = relative_sinusoids(max(newest, n_query - 1) + 1, self.pe.shape[1]).to(self.pe)
            center = self.pe.shape[0] // 2
        return self.pe[center - newest: center + n_query]

    def _whole(self, layers: nn.ModuleList, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        pos, rel = self._positions(t - 1, t), relative_index(t, t, t - 1, x.device)
        mask = self._valid(lens, t)[:, None, None, :]
        for layer in layers:
            x, _ = layer(x, pos, rel, mask)
        return x

    def _chunk(self, layers: nn.ModuleList, x: torch.Tensor, caches, past: int) -> tuple[torch.Tensor, list]:
        # Queries sit at past + a among past + t keys: query 0 against key 0 is distance `past`, the
        # row t - 1 of a table whose newest position is past + t - 1.
        t = x.shape[1]
        pos, rel = self._positions(past + t - 1, t), relative_index(t, past + t, t - 1, x.device)
        new = []
        for layer, cache in zip(layers, caches):
            x, kv = layer(x, pos, rel, cache=cache)
            new.append(kv)
        return x, new

    def _fixed(self, layers: nn.ModuleList, x: torch.Tensor, buffers: torch.Tensor,
               past: torch.Tensor) -> torch.Tensor:
        # Same distances as `_chunk`, over all `cap` slots: the table's newest position is cap - 1, so
        # query 0 against key 0 (distance `past`) is row cap - 1 - past; slots past the chunk are masked.
        t, cap = x.shape[1], buffers.shape[3]
        slots = torch.arange(cap, device=x.device)
        pos, rel = self._positions(cap - 1, t), relative_index(t, cap, cap - 1 - past, x.device)
        mask = slots < past + t
        write_at = slots[:t] + past
        for layer, buffer in zip(layers, buffers):
            x, _ = layer(x, pos, rel, mask, buffer, write_at)
        return x

    def _check_stride(self) -> None:
        # The packed cache gives the upsampled layers 2 frames per token-layer frame.
        if self.stride != 2:
            raise ValueError(f"streaming needs up_stride 2 (the stock packed cache layout), got {self.stride}")

    def _check_chunk_caches(self, cnn_cache: torch.Tensor | None, att_cache: torch.Tensor | None) -> None:
        self._check_stride()
        if att_cache is not None and att_cache.shape[3] % 2:
            raise ValueError(f"packed attention cache has an odd length {att_cache.shape[3]}")
        if cnn_cache is not None and cnn_cache.shape[2] != CONV2_CONTEXT + 2 * self.stride:
            raise ValueError(f"cnn cache has {cnn_cache.shape[2]} frames, expected {CONV2_CONTEXT + 2 * self.stride}")
