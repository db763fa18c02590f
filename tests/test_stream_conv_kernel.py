"""The streaming convolution kernel (engine.kernels.stream_conv) against the torch formula of
engine.ops.conv, under Triton's interpreter on the CPU (or on CUDA): chunk after chunk, with the
ELU on the input, the residual, strides, dilations and chunks shorter than the tail; then the demo
Mimi's SEANet encoder and decoder streamed through it."""
import types

import numpy as np
import pytest
import torch
from torch import nn

from engine.ops import conv as conv_ops
from engine.state import FullStore
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


@pytest.fixture
def fp32(monkeypatch):
    """The kernel's products in plain fp32, so that it agrees with the torch formula to fp32
    rounding (its default, TF32, has its own test)."""
    from engine.kernels import stream_conv

    monkeypatch.setattr(stream_conv, "PRECISION", "ieee")


def _stream(conv: nn.Conv1d, chunks, tail_len: int, elu, residuals, kernel: bool):
    tail = torch.zeros(1, conv.in_channels, tail_len, device=conv.weight.device) if tail_len else None
    outs = []
    for x, r in zip(chunks, residuals):
        if kernel:
            from engine.kernels.stream_conv import stream_conv

            y = stream_conv(x, tail, conv.weight, conv.bias, conv.stride[0], conv.dilation[0], elu, r)
        else:
            y = conv_ops.streaming_conv(x.cpu(), None if tail is None else tail.cpu(), conv.cpu(), elu,
                                        None if r is None else r.cpu())
        outs.append(y.cpu())
    return outs, None if tail is None else tail.cpu()


@pytest.mark.parametrize("c_in,c_out,k,stride,dil,t,elu,res", [
    (64, 32, 3, 1, 1, 40, 1.0, False),   # a residual block's first convolution
    (32, 64, 1, 1, 1, 40, 1.0, True),    # its second, with the skip
    (16, 24, 8, 4, 1, 32, 1.0, False),   # downsampling
    (24, 20, 7, 1, 1, 2, None, False),   # a chunk shorter than the tail (the decoder's first)
    (8, 16, 3, 1, 2, 10, 0.5, True),     # dilated
    (1, 16, 7, 1, 1, 48, None, False),   # the encoder's first
    (256, 128, 3, 1, 1, 16, 1.0, False),  # a deep stage's block: its depth split over programs
    (128, 96, 10, 5, 1, 40, 1.0, True),   # a deep downsampling, split, with a residual
    (512, 48, 8, 4, 1, 8, 1.0, False),    # the last stage's: its depth walked in wide chunks
])
def test_chunks_stream_as_the_torch_formula(device, fp32, c_in, c_out, k, stride, dil, t, elu, res):
    torch.manual_seed(k * 100 + c_in)
    conv = nn.Conv1d(c_in, c_out, k, stride, dilation=dil)
    tail_len = (k - 1) * dil + 1 - stride
    chunks = [torch.randn(1, c_in, t) for _ in range(3)]
    t_out = (tail_len + t - (k - 1) * dil - 1) // stride + 1
    residuals = [torch.randn(1, c_out, t_out) if res else None for _ in chunks]
    want, want_tail = _stream(conv, [c.clone() for c in chunks], tail_len, elu, residuals, kernel=False)
    on = conv.to(device)
    got, got_tail = _stream(on, [c.to(device) for c in chunks], tail_len, elu,
                            [None if r is None else r.to(device) for r in residuals], kernel=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    if tail_len:
        torch.testing.assert_close(got_tail, want_tail, rtol=0, atol=1e-6)  # ELU: exp - 1 against expm1


def test_the_split_is_a_function_of_the_shape_and_adds_up_the_same_bits(device, fp32, monkeypatch):
    """A deep, short layer splits its depth (over at most MAX_SPLIT programs, each at least
    _MIN_SPAN of it in whole chunks) and a wide, long one does not; the split output is the same
    every call, and within fp32 rounding of the unsplit kernel's (MAX_SPLIT = 1)."""
    from engine.kernels import stream_conv as kernel

    for depth in (300, 512 * 3, 512 * 16):
        split, span, bk = kernel.tiles(256, 2, depth)[2:]
        assert 1 < split <= kernel.MAX_SPLIT and span % bk == 0 and span >= kernel._MIN_SPAN
        assert (split - 1) * span < depth <= split * span  # the last span may be shorter
    assert [kernel.chunk(d) for d in (768, 1536, 8192)] == [kernel.BK, kernel.DEEP_BK, kernel.DEEP_BK]
    assert kernel.tiles(64, 1920, 64 * 3)[2] == 1 and kernel.tiles(32, 1920, 64 * 3)[2] == 1
    assert kernel.tiles(1024, 640, 64 * 3)[1] == 64 and kernel.tiles(32, 1920, 64 * 3)[1] == 16  # fill the machine
    torch.manual_seed(0)
    conv = nn.Conv1d(256, 128, 3).to(device)
    x, tail = torch.randn(1, 256, 16, device=device), torch.randn(1, 256, 2, device=device)

    def once():
        return kernel.stream_conv(x, tail.clone(), conv.weight, conv.bias, 1, 1, 1.0, None)
    split = once()
    assert torch.equal(split, once())
    monkeypatch.setattr(kernel, "MAX_SPLIT", 1)
    torch.testing.assert_close(split, once(), rtol=1e-5, atol=1e-5)


def test_the_demo_seanet_streams_as_the_torch_formula(device, fp32, monkeypatch):
    """The demo Mimi's SEANet encoder and decoder, three chunks each, with the convolutions the
    kernel takes on the kernel (the dispatch's machine test forced true for this seam alone).
    On CUDA the torch side's convolutions are cuDNN's, in full fp32 here (TF32 off) as the
    kernel's are."""
    from engine.families.moshi.mimi import load_mimi
    from engine.files.paths import DEMO_MODEL_DIR, MIMI_NAME

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)

    mimi = load_mimi(DEMO_MODEL_DIR / MIMI_NAME, device=device)
    gen = np.random.default_rng(3)
    pcm = [torch.from_numpy(gen.standard_normal((1, 1, mimi.frame_size)).astype(np.float32) * 0.1)
           for _ in range(3)]

    def run(kernel: bool):
        if kernel:
            monkeypatch.setattr(conv_ops, "dispatch", types.SimpleNamespace(use_triton=lambda x: True))
        else:
            monkeypatch.setattr(conv_ops, "dispatch", types.SimpleNamespace(use_triton=lambda x: False))
        enc, dec = FullStore(mimi.encoder.regions(), device), FullStore(mimi.decoder.regions(), device)
        latents = [mimi.encoder(p.to(device), enc) for p in pcm]
        return latents, [mimi.decoder(z, dec) for z in latents]

    with torch.no_grad():
        want_latent, want_pcm = run(kernel=False)
        got_latent, got_pcm = run(kernel=True)
    for g, w in zip(got_latent + got_pcm, want_latent + want_pcm):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_tf32_products_stay_within_their_rounding(device):
    """The default arithmetic: TF32 products (10-bit mantissas) summed in fp32, against the
    convolution in float64, within TF32's bound: each product's operands rounded, relative
    2^-10 each, on the sum of the products' magnitudes."""
    from engine.kernels.stream_conv import stream_conv

    torch.manual_seed(5)
    conv = nn.Conv1d(256, 128, 3).double()
    x, tail = torch.randn(1, 256, 16, dtype=torch.float64), torch.randn(1, 256, 2, dtype=torch.float64)
    full = torch.cat([tail, x], dim=-1)
    want = conv(full)
    bound = 2 * 2.0 ** -10 * torch.nn.functional.conv1d(full.abs(), conv.weight.abs()) + 1e-6
    on = nn.Conv1d(256, 128, 3).to(device)
    on.load_state_dict({k: v.float() for k, v in conv.state_dict().items()})
    got = stream_conv(x.float().to(device), tail.float().to(device), on.weight, on.bias, 1, 1, None, None).cpu()
    assert ((got.double() - want).abs() <= bound).all()


def test_the_kernels_take_fewer_launches_than_torchs_operations(device):
    """bench.mimi_ops: SEANet and the quantizer, one frame of the demo codec (its counts are the
    bench's; here only that each piece needs fewer)."""
    if device != "cpu":
        pytest.skip("the count runs the kernels under the interpreter")
    from bench.mimi_ops import count

    for piece, (torch_ops, kernel_ops) in count().items():
        assert kernel_ops < torch_ops, piece


def test_the_convolutions_bench_finds_every_streaming_convolution_of_a_frame():
    """bench.seanet_convs times each of a frame's SEANet convolutions and transposed
    convolutions on CUDA; which ones and with what inputs it records on any device (the demo
    codec here, on the CPU)."""
    from bench.seanet_convs import _layers
    from engine.families.moshi.mimi import load_mimi
    from engine.files.paths import DEMO_MODEL_DIR, MIMI_NAME

    mimi = load_mimi(DEMO_MODEL_DIR / MIMI_NAME)
    calls = _layers(mimi, "cpu")
    parts = (mimi.encoder, mimi.decoder, *([mimi.downsample] if mimi.downsample is not None else []))
    convs = [m for part in parts for m in part.modules() if type(m) in (nn.Conv1d, nn.ConvTranspose1d)]
    assert len(calls) == len(convs) and {id(c["layer"]) for c in calls} == {id(m) for m in convs}
    assert all(c["x"].shape[1] == c["layer"].in_channels for c in calls)
    assert any(c["residual"] is not None for c in calls if "tail" in c) and any(c["elu"] is not None for c in calls)
    assert any("partial" in c and c["partial"] is not None for c in calls)
