"""Ring attention (CPU path) against the stock masked attention and the reference's ring."""
import pytest
import torch
from moshi.modules.transformer import RingKVCache

from engine.ops.attention import ring_attention
from engine.state import Region
from engine.state.demand import DemandStore
from engine.transformer import attend
from tests.gpu.ring_reference import ring_positions


def _stock(q, kv_ring, pos, T, context):
    """Masked attention over every slot, as the stock runtime does (unwritten slots zeroed)."""
    ring = kv_ring.shape[0]
    kv = kv_ring.nan_to_num(0.0)
    keys, values = (kv[:, i].transpose(0, 1).unsqueeze(0) for i in (0, 1))
    return attend(q, keys, values, pos + torch.arange(T), ring_positions(ring, pos, T), context)


def _write(kv_ring, pos, k, v):
    """k, v [T, H, D] into the slots of positions pos .. pos+T-1."""
    slots = (pos + torch.arange(k.shape[0])) % kv_ring.shape[0]
    kv_ring[:, 0].index_copy_(0, slots, k)
    kv_ring[:, 1].index_copy_(0, slots, v)


@pytest.mark.parametrize("ring,context,T,H,D", [
    (7, 7, 1, 2, 8),      # Mimi/LM temporal: ring = context, one step at a time
    (6, 6, 2, 4, 16),     # Mimi at 25 Hz: two steps per frame
    (9, 5, 3, 2, 8),      # window shorter than the ring
    (4, None, 1, 3, 8),   # depformer-like: no window beyond the ring
])
def test_matches_stock_attention_across_wraps(ring, context, T, H, D):
    torch.manual_seed(ring * 10 + T)
    L = 3
    region = torch.full((ring, L, 2, H, D), float("nan"))  # unwritten entries are poison
    kv_ring = region[:, 1]  # a strided one-layer view, as the transformer passes it
    pos = torch.zeros(1, dtype=torch.long)
    for _ in range(4 * ring // T + 2):
        q = torch.randn(1, H, T, D)
        _write(kv_ring, pos, torch.randn(T, H, D), torch.randn(T, H, D))
        got = ring_attention(q, kv_ring, pos, T, context)
        torch.testing.assert_close(got, _stock(q, kv_ring, pos, T, context), rtol=1e-5, atol=1e-5)
        pos += T


def test_matches_reference_ring_cache_positions():
    """The reference's RingKVCache decides which entries each query sees; compare with it."""
    torch.manual_seed(3)
    ring, context, T, H, D = 5, 5, 2, 2, 8
    cache = RingKVCache(1, H, D, ring, respect_exec_mask=False, device=torch.device("cpu"),
                        dtype=torch.float32)
    kv_ring = torch.full((ring, 2, H, D), float("nan"))
    pos = torch.zeros(1, dtype=torch.long)
    for _ in range(7):
        q, k, v = (torch.randn(1, H, T, D) for _ in range(3))
        ref = cache.complete(k, v, torch.ones(1, dtype=torch.bool))
        pos_q = pos + torch.arange(T)
        delta = pos_q.view(-1, 1) - ref.positions.view(1, -1)
        mask = (ref.positions.view(1, -1) >= 0) & (delta >= 0) & (delta < context)
        expected = torch.nn.functional.scaled_dot_product_attention(q, ref.keys, ref.values, mask)
        _write(kv_ring, pos, k[0].transpose(0, 1), v[0].transpose(0, 1))
        torch.testing.assert_close(ring_attention(q, kv_ring, pos, T, context), expected,
                                   rtol=1e-5, atol=1e-5)
        pos += T


def test_reads_only_backed_entries_of_a_demand_sized_ring():
    ring, H, D = 12, 2, 8
    store = DemandStore([Region("t.kv", (1, 2, H, D), torch.float32, "frame", ring)])
    kv_ring = store["t.kv"][:, 0]
    pos = torch.zeros(1, dtype=torch.long)
    stock_saw_poison = False
    for frame in range(ring + 3):
        store.advance("frame")
        q = torch.randn(1, H, 1, D)
        _write(kv_ring, pos, torch.randn(1, H, D), torch.randn(1, H, D))
        out = ring_attention(q, kv_ring, pos, 1, ring)
        assert torch.isfinite(out).all(), f"frame {frame}: read an unbacked entry"
        keys, values = (kv_ring[:, i].transpose(0, 1).unsqueeze(0) for i in (0, 1))
        stock = attend(q, keys, values, pos, ring_positions(ring, pos, 1), ring)
        stock_saw_poison |= bool(torch.isnan(stock).any())
        pos += 1
    assert stock_saw_poison, "guard: attending over the whole ring must hit the poison"


@pytest.mark.parametrize("q_shape,ring,T", [((1, 2, 1, 8), 4, 1), ((1, 3, 5, 8), 4, 5)],
                         ids=["heads", "more-queries-than-ring"])
def test_rejects_mismatched_shapes(q_shape, ring, T):
    with pytest.raises(ValueError, match="does not fit"):
        ring_attention(torch.zeros(q_shape), torch.zeros(ring, 2, 3, 8), torch.zeros(1, dtype=torch.long), T, ring)
