"""Our Step-Audio2 DiT estimator (engine/token2wav/dit.py) against the stock one (minicpmo-utils 1.0.7).

Weights are random (the stock init zeroes every gate and the output layer, which would make any two
networks agree); streaming is driven the way the stock solver and Token2wav drive it: CFG-doubled batch,
a prompt chunk without cache, then chunks of several lengths, with the attention cache trimmed to the
first `prompt_frames` and last 100 rows between calls.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.token2wav.dit import DiT
from engine.token2wav.token2wav_config import DiTConfig
from tests.stepaudio2_reference import randomize, stock

SMALL = dict(in_channels=32, out_channels=8, mlp_ratio=4.0, depth=2, num_heads=2, head_dim=24, hidden_size=64)
PROMPT_FRAMES = 60
CHUNKS = [PROMPT_FRAMES, 50, 50, 13, 50, 1, 50]  # the first one goes in without cache
TAIL = 100  # rows Token2wav keeps from the end of the cache




def _pair(batch: int = 2, capacity: int = 400):
    """(stock, ours) with the same random weights, the stock's chunk buffers sized for SMALL."""
    torch.manual_seed(0)
    ref = stock("cosyvoice2.flow.decoder_dit").DiT(**SMALL).eval()
    randomize(ref)
    # The stock writes every chunk's caches into these fixed buffers, shaped for the official model.
    ref.att_cache_buffer = torch.zeros(SMALL["depth"], batch, SMALL["num_heads"], capacity, 2 * SMALL["head_dim"])
    ref.cnn_cache_buffer = torch.zeros(SMALL["depth"], batch, 2 * SMALL["hidden_size"], 2)
    ours = DiT(**SMALL).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref, ours


def _chunk_inputs(frames: int, mel: int = SMALL["out_channels"]):
    """x, mu, t, spks, cond for one estimator call, CFG-doubled like the stock solver."""
    x = torch.randn(1, mel, frames)
    mu, spks, cond = torch.randn(1, mel, frames), torch.randn(1, mel), torch.randn(1, mel, frames)
    t = torch.rand(1)
    return (x.repeat(2, 1, 1), torch.cat([mu, torch.zeros_like(mu)]), t.repeat(2),
            torch.cat([spks, torch.zeros_like(spks)]), torch.cat([cond, torch.zeros_like(cond)]))


def _trim(att: torch.Tensor) -> torch.Tensor:
    """Token2wav's `_trim_estimator_cache` on one estimator's cache (time on axis 3)."""
    if att.shape[3] > PROMPT_FRAMES + TAIL:
        att = torch.cat([att[:, :, :, :PROMPT_FRAMES], att[:, :, :, -TAIL:]], dim=3)
    return att


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def test_official_state_dict_layout():
    ref = stock("cosyvoice2.flow.decoder_dit").DiT(in_channels=320, out_channels=80, mlp_ratio=4.0, depth=16,
                                                   num_heads=8, head_dim=64, hidden_size=512)
    ours = DiT(**dataclasses.asdict(DiTConfig()))
    expected = [(key, tuple(value.shape)) for key, value in ref.state_dict().items()]
    assert [(key, tuple(value.shape)) for key, value in ours.state_dict().items()] == expected
    assert [(key, tuple(value.shape)) for key, value in DiT().state_dict().items()] == expected
    ours.load_state_dict(ref.state_dict(), strict=True)


def test_forward_matches_stock():
    ref, ours = _pair()
    frames = 37
    x, mu, t, spks, cond = _chunk_inputs(frames)
    mask = torch.ones(2, 1, frames)
    mask[1, :, 29:] = 0  # padded keys in one batch row
    with torch.no_grad():
        expected = ref(x, mask, mu, t, spks, cond)
        got = ours(x, mask, mu, t, spks, cond)
    assert expected.abs().max() > 0.1  # a real signal, not the zero-initialized output layer
    assert _max_diff(got, expected) <= 1e-6  # the same operations in the same order: measured 0


def test_forward_without_spks_and_cond():
    torch.manual_seed(1)
    config = dict(SMALL, in_channels=16)
    ref = stock("cosyvoice2.flow.decoder_dit").DiT(**config).eval()
    randomize(ref)
    ours = DiT(**config).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x, mu = torch.randn(2, 8, 21), torch.randn(2, 8, 21)
    mask, t = torch.ones(2, 1, 21), torch.tensor([0.2, 0.9])
    with torch.no_grad():
        assert _max_diff(ours(x, mask, mu, t), ref(x, mask, mu, t)) <= 1e-6


def test_forward_chunk_matches_stock_with_trimming():
    ref, ours = _pair()
    cnn = att = None
    lengths = []
    with torch.no_grad():
        for frames in CHUNKS:
            inputs = _chunk_inputs(frames)
            ref_out, ref_cnn, ref_att = ref.forward_chunk(
                *inputs, None if cnn is None else cnn.clone(), None if att is None else att.clone())
            out, new_cnn, new_att = ours.forward_chunk(*inputs, cnn, att)
            # The stock returns views of buffers it overwrites on the next call.
            ref_out, ref_cnn, ref_att = ref_out.clone(), ref_cnn.clone(), ref_att.clone()
            assert _max_diff(out, ref_out) <= 1e-6
            assert _max_diff(new_cnn, ref_cnn) <= 1e-6
            assert _max_diff(new_att, ref_att) <= 1e-6
            cnn, att = new_cnn, _trim(new_att)
            lengths.append(att.shape[3])
    assert lengths == [60, 110, 160, 160, 160, 160, 160]  # trimming did happen, more than once


@pytest.mark.parametrize("length_as_tensor", [False, True])
def test_forward_chunk_into_matches_forward_chunk(length_as_tensor):
    _, ours = _pair()
    depth, heads, width = SMALL["depth"], SMALL["num_heads"], 2 * SMALL["head_dim"]
    capacity = 256  # PROMPT_FRAMES + TAIL kept, plus the longest chunk
    # Unused rows hold large finite junk: the masking, not zeros, must keep them out.
    att_state = 100 * torch.randn(depth, 2, heads, capacity, width)
    cnn_state = torch.zeros(depth, 2, 2 * SMALL["hidden_size"], 2)
    att_len = 0
    # Which signal frame each cache row holds, in the concatenated cache and in the fixed state.
    cache_frames: list[int] = []
    state_frames: list[int] = []
    cnn = att = None
    done = 0
    with torch.no_grad():
        for frames in CHUNKS:
            inputs = _chunk_inputs(frames)
            expected, cnn, att = ours.forward_chunk(*inputs, cnn, att)
            length = torch.tensor(att_len) if length_as_tensor else att_len
            got = ours.forward_chunk_into(*inputs, cnn_state, att_state, length)
            new = list(range(done, done + frames))
            done += frames
            cache_frames = new + cache_frames
            state_frames = state_frames + new
            att_len += frames

            # Same rows, other key order and a mask: equal up to float summation order.
            assert _max_diff(got, expected) <= 1e-5
            assert _max_diff(cnn_state, cnn) <= 1e-5
            order = [cache_frames.index(frame) for frame in state_frames]
            assert _max_diff(att_state[:, :, :, :att_len], att[:, :, :, order]) <= 1e-5

            # Trim both the way Token2wav does: the same rows survive; the fixed state is compacted.
            att = _trim(att)
            if len(cache_frames) > PROMPT_FRAMES + TAIL:
                cache_frames = cache_frames[:PROMPT_FRAMES] + cache_frames[-TAIL:]
                kept = set(cache_frames)
                keep = [i for i, frame in enumerate(state_frames) if frame in kept]
                att_state[:, :, :, :len(keep)] = att_state[:, :, :, keep]
                state_frames = [state_frames[i] for i in keep]
                att_len = len(keep)
    assert att_len == 160 and done == sum(CHUNKS)


def test_forward_chunk_into_refuses_overflow():
    _, ours = _pair()
    inputs = _chunk_inputs(10)
    att_state = torch.zeros(SMALL["depth"], 2, SMALL["num_heads"], 16, 2 * SMALL["head_dim"])
    cnn_state = torch.zeros(SMALL["depth"], 2, 2 * SMALL["hidden_size"], 2)
    with pytest.raises(ValueError, match="16 rows"):
        ours.forward_chunk_into(*inputs, cnn_state, att_state, 10)


def test_half_precision_runs():
    _, ours = _pair()
    ours = ours.half()
    inputs = [tensor.half() for tensor in _chunk_inputs(12)]
    att_state = torch.zeros(SMALL["depth"], 2, SMALL["num_heads"], 32, 2 * SMALL["head_dim"], dtype=torch.half)
    cnn_state = torch.zeros(SMALL["depth"], 2, 2 * SMALL["hidden_size"], 2, dtype=torch.half)
    with torch.no_grad():
        out, cnn, att = ours.forward_chunk(*inputs)
        into = ours.forward_chunk_into(*inputs, cnn_state, att_state, 0)
        whole = ours(inputs[0], torch.ones(2, 1, 12, dtype=torch.half), *inputs[1:])
    assert out.dtype == cnn.dtype == att.dtype == torch.half
    assert torch.isfinite(out).all() and torch.isfinite(into).all() and torch.isfinite(whole).all()
    assert (into.float() - out.float()).abs().max() < 1e-2
