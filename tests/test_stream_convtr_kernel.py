"""The streaming transposed convolution kernels (engine.kernels.stream_convtr) against the torch
formula of engine.ops.conv, under Triton's interpreter on the CPU (or on CUDA): chunk after
chunk, the partial sums carried between them, with and without the ELU and the bias, kernels of
one, two and three strides, a depth split over programs."""
import pytest
import torch
from torch import nn

from engine.ops import conv as conv_ops
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _stream(layer: nn.ConvTranspose1d, chunks, elu, kernel: bool):
    over = layer.kernel_size[0] - layer.stride[0]
    partial = torch.zeros(1, layer.out_channels, over, device=layer.weight.device) if over else None
    outs = []
    for x in chunks:
        if kernel:
            from engine.kernels.stream_convtr import stream_conv_transpose

            y = stream_conv_transpose(x, partial, layer.weight, layer.bias, layer.stride[0], elu)
        else:
            y = conv_ops.streaming_conv_transpose(x, partial, layer, elu)
        outs.append(y.cpu())
    return outs, None if partial is None else partial.cpu()


@pytest.mark.parametrize("c_in,c_out,k,stride,t,elu,bias", [
    (64, 32, 8, 4, 10, 1.0, True),     # SEANet's last upsampling, shorter
    (48, 24, 12, 6, 2, 1.0, True),     # a chunk of two steps
    (16, 8, 4, 4, 3, None, False),     # kernel = stride: nothing kept
    (8, 12, 9, 3, 1, 0.5, True),       # three taps a sample, more kept than one step emits
    (1024, 16, 4, 2, 2, 1.0, True),    # deep and short: the depth split over programs
    (1024, 512, 16, 8, 2, 1.0, True),  # the official Mimi's four upsamplings, as a frame runs them
    (512, 256, 12, 6, 16, 1.0, True),
    (256, 128, 10, 5, 96, 1.0, True),
    (128, 64, 8, 4, 480, 1.0, True),
])
def test_chunks_stream_as_the_torch_formula(device, monkeypatch, c_in, c_out, k, stride, t, elu, bias):
    from engine.kernels import stream_conv

    monkeypatch.setattr(stream_conv, "PRECISION", "ieee")  # plain fp32: agree to fp32 rounding
    torch.manual_seed(c_in + k)
    layer = nn.ConvTranspose1d(c_in, c_out, k, stride, bias=bias)
    chunks = [torch.randn(1, c_in, t) for _ in range(3)]
    want, want_partial = _stream(layer, [c.clone() for c in chunks], elu, kernel=False)
    got, got_partial = _stream(layer.to(device), [c.to(device) for c in chunks], elu, kernel=True)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    if want_partial is not None:
        torch.testing.assert_close(got_partial, want_partial, rtol=1e-5, atol=1e-5)


def test_the_split_is_a_function_of_the_shape_and_the_same_bits_every_call(device):
    from engine.kernels.stream_convtr import stream_conv_transpose, tiles

    assert tiles(512 * 16, 2, 1024)[2] > 1 and tiles(64 * 8, 480, 128)[2] == 1
    torch.manual_seed(1)
    layer = nn.ConvTranspose1d(1024, 16, 4, 2).to(device)
    x = torch.randn(1, 1024, 2, device=device)
    partial = torch.randn(1, 16, 2, device=device)

    def once():
        return stream_conv_transpose(x, partial.clone(), layer.weight, layer.bias, 2, 1.0)
    assert torch.equal(once(), once())


def test_bad_shapes_are_refused_by_name(device):
    from engine.kernels.stream_convtr import stream_conv_transpose

    weight = torch.zeros(8, 4, 6, device=device)
    with pytest.raises(ValueError, match="stream transposed conv"):
        stream_conv_transpose(torch.zeros(1, 7, 3, device=device), torch.zeros(1, 4, 3, device=device), weight,
                              None, 3, None)
    with pytest.raises(ValueError, match="partial"):
        stream_conv_transpose(torch.zeros(1, 8, 3, device=device), None, weight, None, 3, None)
