"""One CUDA graph, captured while the KV ring was nearly unbacked, replayed as the ring grows
(memory mapped after capture), wraps, and is reset: bit-identical to eager, correct, and
the ring never moves."""
import pytest
import torch

from engine.ops.attention import ring_attention
from engine.state import Region
from engine.state.demand import DemandStore
from engine.state.vmm import allocation_granularity
from tests.gpu.ring_reference import reference_attention

pytestmark = pytest.mark.gpu
L, H, D = 2, 32, 128  # one entry = 32 KiB in bf16: 64 entries per 2 MiB granule


def _regions(ring, clock):
    return [Region("t.pos", (1,), torch.int64),
            Region("t.kv", (L, 2, H, D), torch.bfloat16, clock, ring)]


def _step(store, q, k, v, T, context):
    """One frame of one layer: write the T new entries, attend, advance the position."""
    pos, kv = store["t.pos"], store["t.kv"][:, 1]
    slots = (pos + torch.arange(T, device=pos.device)) % kv.shape[0]
    kv[:, 0].index_copy_(0, slots, k)
    kv[:, 1].index_copy_(0, slots, v)
    out = ring_attention(q, kv, pos, T, context)
    pos.add_(T)
    return out


@pytest.mark.parametrize("T,ring,context,clock", [(1, 300, 300, "frame"), (2, 260, 250, "mimi_step")])
def test_graph_replay_tracks_growth_bit_exact(T, ring, context, clock, record):
    torch.manual_seed(T)
    frames = (ring + 100) // T
    graph_store = DemandStore(_regions(ring, clock), "cuda")
    eager_store = DemandStore(_regions(ring, clock), "cuda")
    entry, gran = graph_store.regions["t.kv"].entry_bytes(), allocation_granularity()
    q_in, k_in, v_in = (torch.zeros(1, H, T, D, device="cuda", dtype=torch.bfloat16),
                        torch.zeros(T, H, D, device="cuda", dtype=torch.bfloat16),
                        torch.zeros(T, H, D, device="cuda", dtype=torch.bfloat16))

    graph_store.advance(clock, T)
    _step(graph_store, q_in, k_in, v_in, T, context)  # compiles the kernels before capture
    graph_store.reset()
    graph_store.advance(clock, T)
    mapped_at_capture = graph_store.nbytes("t.kv")
    base = graph_store["t.kv"].data_ptr()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_graph = _step(graph_store, q_in, k_in, v_in, T, context)

    mismatches, worst_rel, mapped = 0, 0.0, []
    for f in range(frames):
        if f:
            graph_store.advance(clock, T)
        eager_store.advance(clock, T)
        q, k, v = (torch.randn(s, device="cuda").to(torch.bfloat16) for s in ((1, H, T, D), (T, H, D), (T, H, D)))
        q_in.copy_(q), k_in.copy_(k), v_in.copy_(v)
        graph.replay()
        eager = _step(eager_store, q, k, v, T, context)
        mismatches += not torch.equal(out_graph, eager)
        assert graph_store["t.kv"].data_ptr() == base
        backed = min((f + 1) * T, ring) * entry
        assert graph_store.nbytes("t.kv") == max(-(-backed // gran), 1) * gran
        if f % 20 == 0 or f == frames - 1:
            ref = reference_attention(q, graph_store["t.kv"][:, 1], f * T, T, context)
            worst_rel = max(worst_rel, ((out_graph.double().cpu() - ref).norm() / ref.norm()).item())
            mapped.append((f, graph_store.nbytes("t.kv")))
    torch.cuda.synchronize()
    record("frames", frames)
    record("graph_vs_eager_mismatching_frames", mismatches)
    record("rel_err_vs_float64", worst_rel)
    record("mapped_at_capture", mapped_at_capture)
    record("mapped_by_frame", mapped)
    assert mismatches == 0
    assert worst_rel < 5e-3
    assert graph_store.nbytes("t.kv") > mapped_at_capture  # memory really was mapped after capture

    graph_store.reset()  # a new conversation: memory returns, the same graph still serves
    eager_store.reset()
    for _ in range(3):
        graph_store.advance(clock, T)
        eager_store.advance(clock, T)
        q, k, v = (torch.randn(s, device="cuda").to(torch.bfloat16) for s in ((1, H, T, D), (T, H, D), (T, H, D)))
        q_in.copy_(q), k_in.copy_(k), v_in.copy_(v)
        graph.replay()
        assert torch.equal(out_graph, _step(eager_store, q, k, v, T, context))
    assert graph_store.nbytes("t.kv") == mapped_at_capture
    graph_store.close()
    eager_store.close()
