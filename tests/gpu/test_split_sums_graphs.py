"""Graphs captured one after another on one stream share its split sums' arrival counters. Each must
find them at zero whatever order they replay in: the counters are made, zeroed, on the capture
stream before the first capture (`split_sums.ready`, as MiniCPM-o's prepare does), not inside it,
where only that graph's replay would zero them. The later graph replays first here, as MiniCPM-o's
ten-row LLM pass did after the two-row pass had made them in its capture."""
import pytest
import torch

from engine.ops.linear import linear
from engine.runtime.graphs import Graphs

pytestmark = pytest.mark.gpu
split_sums = pytest.importorskip("engine.kernels.split_sums")  # Triton: not on a CPU-only machine


def test_a_graph_replayed_before_the_one_captured_first_finds_the_counters_at_zero():
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    weight = (torch.randn(1024, 4096, generator=g, device=device) * 4096 ** -0.5).to(torch.bfloat16)
    rows = {n: torch.randn(n, 4096, generator=g, device=device).to(torch.bfloat16) for n in (2, 10)}
    eager = {n: linear(x, weight).clone() for n, x in rows.items()}  # split in four: 32 tiles of 1024 outputs
    graphs = Graphs(device)
    with torch.cuda.stream(graphs.capture_stream()):
        split_sums.ready(device)
    outputs = {n: graphs.capture(n, lambda x=x: linear(x, weight)) for n, x in rows.items()}
    counters = split_sums.counters(device, 0)  # the default stream's; the capture stream's are checked below
    stream_block = split_sums._counters[(device, graphs.capture_stream().cuda_stream)]
    assert counters.count_nonzero() == 0 and stream_block.count_nonzero() == 0
    for n in (10, 2, 10):
        graphs.run(n)
        torch.cuda.synchronize()
        assert torch.equal(outputs[n], eager[n]), f"the {n}-row product's graph"
