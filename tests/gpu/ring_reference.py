"""Float64 ring attention from first principles: gather each query's live keys, softmax."""
import torch


def live_positions(pos: int, T: int, t: int, ring: int, context: int | None) -> list[int]:
    """Key positions the query at pos + t sees: still in the ring, causal, inside the window."""
    p, end = pos + t, pos + T
    lo = max(0, end - ring, p - context + 1 if context is not None else 0)
    return list(range(lo, p + 1))


def reference_attention(q, kv_ring, pos: int, T: int, context: int | None) -> torch.Tensor:
    ring, _, H, D = kv_ring.shape
    q64 = q.double().cpu()
    out = torch.empty(1, H, T, D, dtype=torch.float64)
    for t in range(T):
        slots = torch.tensor([p % ring for p in live_positions(pos, T, t, ring, context)], device=kv_ring.device)
        kv64 = kv_ring[slots].double().cpu()  # live slots only: the rest may be unmapped
        k, v = kv64[:, 0], kv64[:, 1]  # [n, H, D]
        scores = torch.einsum("hd,nhd->hn", q64[0, :, t], k) / D ** 0.5
        out[0, :, t] = torch.einsum("hn,nhd->hd", torch.softmax(scores, -1), v)
    return out


def ring_positions(ring: int, first_pos: torch.Tensor, T: int) -> torch.Tensor:
    """Full-ring view as the reference builds it: the position held by each slot after
    writing T entries from `first_pos`, -1 where nothing was written yet."""
    idx = torch.arange(ring, device=first_pos.device)
    end = first_pos + T
    delta = idx - (end - 1) % ring
    pos = torch.where(delta <= 0, end - 1 + delta, end - 1 + delta - ring)
    return torch.where(idx < end, pos, torch.full_like(pos, -1))
