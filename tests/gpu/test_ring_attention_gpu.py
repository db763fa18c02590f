"""The Triton ring attention against float64 and torch SDPA; never reads past live keys."""
import pytest
import torch
from torch.nn import functional as F

from engine.ops.attention import ring_attention, torch_ring_attention
from tests.gpu.ring_reference import live_positions, reference_attention

pytestmark = pytest.mark.gpu

CASES = [  # H, D, ring, context, T, dtype
    (32, 128, 3000, 3000, 1, torch.bfloat16),  # Moshi temporal
    (32, 128, 3000, 3000, 1, torch.float32),
    (8, 64, 250, 250, 2, torch.bfloat16),  # Mimi transformer, 2 steps a frame
    (8, 64, 250, 250, 2, torch.float32),
    (16, 64, 16, None, 1, torch.bfloat16),  # depformer
    (4, 96, 100, 37, 2, torch.float32),  # window shorter than the ring, D not a power of 2
    (2, 32, 40, 40, 5, torch.float32),
]


def _positions(ring, T):
    return [0, 1, ring // 2, ring - T, ring - 1, ring + 3, 7 * ring + 5]


@pytest.mark.parametrize("H,D,ring,context,T,dtype", CASES)
def test_matches_float64_and_sdpa(H, D, ring, context, T, dtype, record):
    torch.manual_seed(H * ring + T)
    L, layer = 3, 1
    worst_ref = worst_sdpa = 0.0
    for pos in _positions(ring, T):
        region = torch.randn(ring, L, 2, H, D, device="cuda").to(dtype)
        kv = region[:, layer]
        if pos + T < ring:
            kv[pos + T:] = float("nan")  # never written: must never be read
        q = torch.randn(1, H, T, D, device="cuda").to(dtype)
        out = ring_attention(q, kv, torch.tensor([pos], device="cuda"), T, context)
        assert torch.isfinite(out).all()
        ref = reference_attention(q, kv, pos, T, context)
        rel = ((out.double().cpu() - ref).norm() / ref.norm()).item()
        worst_ref = max(worst_ref, rel)
        for t in range(T):  # SDPA over exactly the live keys
            slots = torch.tensor([p % ring for p in live_positions(pos, T, t, ring, context)], device="cuda")
            k, v = (kv[slots, i].transpose(0, 1).unsqueeze(0) for i in (0, 1))
            sdpa = F.scaled_dot_product_attention(q[:, :, t:t + 1], k, v)
            worst_sdpa = max(worst_sdpa, ((out[:, :, t:t + 1] - sdpa).float().norm() / sdpa.float().norm()).item())
        again = ring_attention(q, kv, torch.tensor([pos], device="cuda"), T, context)
        assert torch.equal(out, again), "not deterministic"
    record("rel_err_vs_float64", worst_ref)
    record("rel_err_vs_sdpa", worst_sdpa)
    assert worst_ref < (1e-5 if dtype == torch.float32 else 5e-3)
    assert worst_sdpa < (1e-4 if dtype == torch.float32 else 1e-2)


def test_torch_path_agrees_on_gpu():
    torch.manual_seed(0)
    kv = torch.randn(300, 2, 8, 64, device="cuda")
    q = torch.randn(1, 8, 2, 64, device="cuda")
    pos = torch.tensor([517], device="cuda")
    torch.testing.assert_close(ring_attention(q, kv, pos, 2, 250), torch_ring_attention(q, kv, pos, 2, 250),
                               rtol=1e-5, atol=1e-5)
