"""The kernel that reads a table's rows where it lies (engine.kernels.host_rows), under Triton's
interpreter on the CPU or on CUDA, where the table is in pinned host memory and the position on
the device: the rows the torch formula gathers from a device table, bit for bit, wrapping at the
table's end; on CUDA also from one captured graph replayed at positions it was not captured at."""
import pytest
import torch

from engine.ops.host_rows import wrapped_rows
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _table(device: str) -> torch.Tensor:
    table = torch.rand(5000, 9, generator=torch.Generator().manual_seed(3))
    return table.pin_memory() if device == "cuda" else table


@pytest.mark.parametrize("first,count", [(0, 1), (17, 2400), (4990, 30), (123_457, 4999), (10, 0)])
def test_rows_are_the_device_tables_wrapping_at_its_end(device, first, count):
    from engine.kernels.host_rows import wrapped_rows as kernel

    table = _table(device)
    position = torch.tensor([first], device=device)
    want = table.to(device).index_select(0, (torch.arange(count, device=device) + first) % len(table))
    got = kernel(table, position, count)
    assert got.device == position.device and torch.equal(got, want)


def test_a_captured_read_follows_the_position(device):
    if device != "cuda":
        pytest.skip("graphs are CUDA's")
    table, position = _table(device), torch.zeros(1, dtype=torch.long, device=device)
    wrapped_rows(table, position, 960)  # compiled before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rows = wrapped_rows(table, position, 960)
    for first in (4500, 9, 77_777):
        position.fill_(first)
        graph.replay()
        assert torch.equal(rows.cpu(), table[(torch.arange(960) + first) % len(table)])


def test_the_same_device_formula_is_torchs():
    table = torch.arange(12.0).view(6, 2)
    assert wrapped_rows(table, torch.tensor([5]), 3).tolist() == [[10.0, 11.0], [0.0, 1.0], [2.0, 3.0]]
