"""The arrival counters of the kernels that split a product's depth over programs and let the
last to finish sum the parts (engine.kernels.split_sums): every launch leaves them at zero, so
the next launch, or a replay, finds them as it needs them; and a second launch gives the same
bits. Under Triton's interpreter on the CPU (or on CUDA)."""
import pytest
import torch

from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _conv(device):
    from engine.kernels import stream_conv

    assert stream_conv.tiles(128, 16, 256 * 3)[2] > 1
    x, w = torch.randn(1, 256, 16, device=device), torch.randn(128, 256, 3, device=device)
    return stream_conv.stream_conv(x, None, w, None, 1, 1, 1.0, None)


def _rows(device):
    from engine.kernels import rows_linear

    assert rows_linear._config(9, 40, 2056, torch.float32).split > 1
    x, w = torch.randn(9, 2056, device=device), torch.randn(40, 2056, device=device)
    return rows_linear.linear(x, w, residual=torch.randn(9, 40, device=device))


def _attention(device):
    from engine.kernels import ring_attention_triton

    assert ring_attention_triton._splits(2, 3, 300, 16, torch.device(device), 16) > 1
    kv, q = torch.randn(300, 2, 2, 16, device=device), torch.randn(1, 2, 3, 16, device=device)
    return ring_attention_triton.triton_ring_attention(q, kv, torch.tensor([290], device=device), 3, None,
                                                       block_n=16, per_query=True)


@pytest.mark.parametrize("launch", [_conv, _rows, _attention])
def test_split_launches_leave_the_counters_at_zero_and_repeat_their_bits(launch, device):
    from engine.kernels import split_sums

    torch.manual_seed(0)
    first = launch(device)
    counters = split_sums.counters(first.device, 0)
    assert counters.count_nonzero() == 0
    torch.manual_seed(0)
    assert torch.equal(launch(device), first)
    assert counters.count_nonzero() == 0
