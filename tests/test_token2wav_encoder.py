"""Our Step-Audio2 flow encoder (engine/token2wav/encoder.py) against the stock `UpsampleConformerEncoderV2`.

Weights are random (the stock init leaves LayerNorms at identity and biases at zero, which would hide
swapped parameters). Streaming is driven the way the stock flow and Token2wav drive it: a prompt without
cache (its 3 lookahead tokens stripped), chunks of new tokens plus 3 lookahead tokens that the next chunk
sends again, a last chunk that flushes, and optionally Token2wav's trimming of the attention cache between
calls. The stock `forward_chunk` is wrapped in torch.compile(backend="eager"); it is run with the compiler
set to eager, which is the same computation without minutes of tracing.
"""
from __future__ import annotations

import ast
import dataclasses
import textwrap
import types
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.token2wav.encoder import UpsampleConformerEncoder
from engine.token2wav.token2wav_config import EncoderConfig
from tests.stepaudio2_reference import randomize, stock

SMALL = dict(input_size=64, output_size=64, attention_heads=2, linear_units=96, num_blocks=2, num_up_blocks=2)
OFFICIAL = dict(input_size=512, output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, num_up_blocks=4,
                pre_lookahead_len=3, up_stride=2, up_scale_factor=2, key_bias=True, normalize_before=True)
LOOKAHEAD = 3
# New tokens per call: the prompt first, then chunks of several lengths, the last one flushing.
CHUNKS = [20, 25, 25, 13, 25, 2, 25, 9]
BATCH = 2


def _stock_module():
    return stock("cosyvoice2.transformer.upsample_encoder_v2")




def _pair(dtype: torch.dtype = torch.float32):
    """(stock, ours) in eval mode with the same random weights."""
    torch.manual_seed(0)
    ref = _stock_module().UpsampleConformerEncoderV2(**SMALL).eval()
    randomize(ref)
    ours = UpsampleConformerEncoder(**SMALL).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref.to(dtype), ours.to(dtype)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item() if a.numel() else 0.0


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs difference, after asserting a and b agree to 1e-5 (shapes exactly)."""
    diff = _max_diff(a, b)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    return diff


def _stock_trim():
    """Token2wav's `_trim_conformer_cache`, compiled alone from the installed token2wav.py (importing that
    module needs onnx and the speech front end), with its history length; called on a small stand-in
    owner that holds only what the method reads."""
    path = Path(_stock_module().__file__).parents[2] / "token2wav.py"
    source = path.read_text()
    owner = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == "Token2wav")
    method = next(node for node in owner.body
                  if isinstance(node, ast.FunctionDef) and node.name == "_trim_conformer_cache")
    history = next(ast.literal_eval(node.value) for node in owner.body
                   if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "CONFORMER_HISTORY_FRAMES")
    namespace = {"torch": torch}
    exec(textwrap.dedent(ast.get_source_segment(source, method)), namespace)  # noqa: S102 (the stock's own code)

    def trim(att: torch.Tensor, prompt_frames: int, num_blocks: int) -> torch.Tensor:
        self = types.SimpleNamespace(
            CONFORMER_HISTORY_FRAMES=history, stream_cache={"conformer_att_cache": att},
            flow=types.SimpleNamespace(encoder=types.SimpleNamespace(encoders=[None] * num_blocks)))
        namespace["_trim_conformer_cache"](self, prompt_frames)
        return self.stream_cache["conformer_att_cache"]

    return trim, history


def _stream(tokens: torch.Tensor, chunks: list[int]):
    """(input, last_chunk) per call: new tokens plus the lookahead ones, which the next call sends again."""
    start = 0
    for i, count in enumerate(chunks):
        last = i == len(chunks) - 1
        yield tokens[:, start: start + count + (0 if last else LOOKAHEAD)], last
        start += count


def _tokens(chunks: list[int]) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(BATCH, sum(chunks) + LOOKAHEAD, SMALL["input_size"])


def _packed(att: torch.Tensor, length: int, num_blocks: int) -> torch.Tensor:
    """A fixed-capacity attention cache in the stock packed layout."""
    token = att[:num_blocks, :, :, :length]
    return torch.cat([token.repeat(1, 1, 1, 2, 1), att[num_blocks:, :, :, : 2 * length]], dim=0)


def _trim_fixed(att: torch.Tensor, att_len: torch.Tensor, prompt_frames: int, history: int, num_blocks: int) -> None:
    """Token2wav's trimming done the fixed-capacity way: the kept tail moved down in place, the length lowered."""
    length = int(att_len)
    if 2 * length <= prompt_frames + history:
        return
    head, tail = prompt_frames // 2, history // 2
    att[:num_blocks, :, :, head: head + tail] = att[:num_blocks, :, :, length - tail: length].clone()
    mel = att[num_blocks:]
    mel[:, :, :, 2 * head: 2 * (head + tail)] = mel[:, :, :, 2 * (length - tail): 2 * length].clone()
    att_len.fill_(head + tail)


def test_official_state_dict_layout():
    ref = _stock_module().UpsampleConformerEncoderV2(**OFFICIAL)
    expected = [(key, tuple(value.shape)) for key, value in ref.state_dict().items()]
    assert [(key, tuple(value.shape)) for key, value in UpsampleConformerEncoder().state_dict().items()] == expected
    ours = UpsampleConformerEncoder(**dataclasses.asdict(EncoderConfig()))
    assert [(key, tuple(value.shape)) for key, value in ours.state_dict().items()] == expected
    ours.load_state_dict(ref.state_dict(), strict=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_matches_stock(dtype, record_property):
    ref, ours = _pair(dtype)
    torch.manual_seed(2)
    xs = torch.randn(BATCH, 37, SMALL["input_size"], dtype=dtype)
    lens = torch.tensor([37, 29])  # the second one padded: masked out of the attention keys only
    with torch.no_grad():
        expected, expected_mask = ref(xs, lens)
        got, mask = ours(xs, lens)
    assert torch.equal(mask, expected_mask)
    record_property("max_abs_diff", _close(got, expected))


def test_last_chunk_alone_is_the_whole_signal():
    # Without cache, a last chunk pads zeros for its lookahead exactly as the whole-signal forward does.
    _, ours = _pair()
    xs = _tokens([30])[:, :30]
    with torch.no_grad():
        whole, _ = ours(xs, torch.full((BATCH,), 30))
        chunk, cnn, att = ours.forward_chunk(xs, last_chunk=True)
    assert chunk.shape == (BATCH, 60, SMALL["output_size"])
    _close(chunk, whole)
    assert cnn.shape == (BATCH, SMALL["output_size"], 6)
    assert att.shape == (4, BATCH, 2, 60, 64)


@pytest.mark.parametrize("trimmed", [False, True], ids=["untrimmed", "trimmed"])
def test_forward_chunk_matches_stock(trimmed, record_property):
    ref, ours = _pair()
    trim, history = _stock_trim()
    prompt_frames = 2 * CHUNKS[0]
    tokens = _tokens(CHUNKS)
    expected = got = (None, None)
    diffs, trims = [], 0
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        for (xs, last), count in zip(_stream(tokens, CHUNKS), CHUNKS):
            h_ref, *expected = ref.forward_chunk(xs, last, *expected)
            h, *got = ours.forward_chunk(xs, last, *got)
            assert h.shape == (BATCH, 2 * count, SMALL["output_size"])
            diffs.append(max(_close(h, h_ref), _close(got[0], expected[0]), _close(got[1], expected[1])))
            if trimmed:
                length = expected[1].shape[3]
                expected[1] = trim(expected[1], prompt_frames, SMALL["num_blocks"])
                got[1] = trim(got[1], prompt_frames, SMALL["num_blocks"])
                trims += expected[1].shape[3] < length
    if trimmed:
        assert trims >= 2 and expected[1].shape[3] == prompt_frames + history
    else:
        assert expected[1].shape[3] == 2 * sum(CHUNKS)
    record_property("max_abs_diff", max(diffs))


@pytest.mark.parametrize("trimmed", [False, True], ids=["untrimmed", "trimmed"])
@pytest.mark.parametrize("prompt", [20, 5], ids=["prompt20", "prompt5"])
def test_fixed_capacity_matches_forward_chunk(trimmed, prompt, record_property):
    _, ours = _pair()
    trim, history = _stock_trim()
    chunks = [prompt, *CHUNKS[1:5], 1, *CHUNKS[5:]]  # a 1-token chunk too (the stock cannot take one)
    n1 = SMALL["num_blocks"]
    tokens = _tokens(chunks)
    cnn, att, att_len = ours.new_fixed_caches(BATCH, capacity=2 * sum(chunks))
    addresses = cnn.data_ptr(), att.data_ptr()
    got = (None, None)
    diffs = []
    with torch.no_grad():
        for xs, last in _stream(tokens, chunks):
            h_ref, *got = ours.forward_chunk(xs, last, *got)
            h = ours.forward_chunk_fixed(xs, last, cnn, att, att_len)
            att_len += h.shape[1] // 2
            length = int(att_len)
            assert got[1].shape[3] == 2 * length
            diffs.append(max(_close(h, h_ref), _close(cnn, got[0]), _close(_packed(att, length, n1), got[1])))
            if trimmed:
                _trim_fixed(att, att_len, 2 * prompt, history, n1)
                got[1] = trim(got[1], 2 * prompt, n1)
    assert (cnn.data_ptr(), att.data_ptr()) == addresses
    assert int(att_len) == (prompt + history // 2 if trimmed else sum(chunks))
    record_property("max_abs_diff", max(diffs))


def test_fixed_capacity_from_a_stock_cache():
    # A stock packed cache copied into the buffer's first frames is a valid state (token layers read one copy).
    ref, ours = _pair()
    tokens = _tokens([20, 25, 1])
    (prompt, _), (chunk, _), _ = _stream(tokens, [20, 25, 1])
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        _, cnn_ref, att_ref = ref.forward_chunk(prompt)
        expected, *_ = ref.forward_chunk(chunk, False, cnn_ref, att_ref)
        cnn, att, att_len = ours.new_fixed_caches(BATCH, capacity=128)
        cnn.copy_(cnn_ref)
        att[:, :, :, : att_ref.shape[3]] = att_ref
        att_len.fill_(att_ref.shape[3] // 2)
        got = ours.forward_chunk_fixed(chunk, False, cnn, att, att_len)
    _close(got, expected)


class _HostReads(TorchDispatchMode):
    """Records the ops that hand a tensor's value to Python or size an output by its values."""

    SYNCING = {"_local_scalar_dense", "is_nonzero", "equal", "nonzero", "masked_select", "_unique2",
               "unique_consecutive", "unique_dim", "repeat_interleave"}

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, arg_types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.SYNCING:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_fixed_capacity_reads_nothing_back():
    _, ours = _pair()
    tokens = _tokens([20, 25])
    cnn, att, att_len = ours.new_fixed_caches(BATCH, capacity=128)
    reads = _HostReads()
    with torch.no_grad(), reads:
        for xs, last in _stream(tokens, [20, 25]):
            h = ours.forward_chunk_fixed(xs, last, cnn, att, att_len)
            att_len += h.shape[1] // 2
    assert reads.seen == []
    # The check itself must see a host read when there is one.
    with reads:
        bool(att_len > 0)
    assert reads.seen
