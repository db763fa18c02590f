"""Sampling draws the same tokens on CUDA as on CPU, and in a replayed graph as eagerly."""
import pytest
import torch

from engine.runtime.sampling import SamplingConfig, advance_rng, sample, seed_rng

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_draws_equal_cpu_draws(dtype, record):
    torch.manual_seed(0)
    cfg = SamplingConfig(0.8, top_k=250)
    rng_cpu, rng_gpu = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64, device="cuda")
    seed_rng(rng_cpu, 99), seed_rng(rng_gpu, 99)
    differ = total = 0
    for _ in range(50):
        logits = torch.randn(17, 2048).to(dtype)
        a = sample(logits, cfg, rng_cpu, 1)
        b = sample(logits.cuda(), cfg, rng_gpu, 1).cpu()
        differ += int((a != b).sum())
        total += a.numel()
        advance_rng(rng_cpu), advance_rng(rng_gpu)
    record("tokens_compared", total)
    record("tokens_differing", differ)
    assert differ == 0


def test_graph_replay_draws_the_eager_sequence():
    torch.manual_seed(1)
    cfg = SamplingConfig(0.7, top_k=25)
    logits = torch.randn(4, 32000, device="cuda")
    rng = torch.zeros(2, dtype=torch.int64, device="cuda")
    seed_rng(rng, 5)
    sample(logits, cfg, rng, 0)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens = sample(logits, cfg, rng, 0)
        advance_rng(rng)
    replayed = []
    for _ in range(20):
        graph.replay()
        replayed.append(tokens.clone())
    seed_rng(rng, 5)
    for got in replayed:
        assert torch.equal(got, sample(logits, cfg, rng, 0))
        advance_rng(rng)
    assert len({tuple(t.tolist()) for t in replayed}) > 1  # the counter really advanced
