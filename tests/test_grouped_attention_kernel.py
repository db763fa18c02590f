"""The split-K attention for grouped query heads over a linear cache (engine.kernels.grouped_attention),
under Triton's interpreter on the CPU (or on CUDA): each row keeps its own causal range and window,
the keys of a run split over many programs merge to torch's masked SDPA, chunks without a key for some
rows included, and the same inputs give the same bits."""
import pytest
import torch

from engine.ops.attention import torch_grouped_attention
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


@pytest.mark.parametrize("window", [None, 70])
@pytest.mark.parametrize(("rep", "T"), [(4, 1), (4, 5), (1, 3), (2, 40)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_rows_over_split_keys_match_torchs_attention(rep, T, window, dtype, device):
    from engine.kernels import grouped_attention as kernel

    torch.manual_seed(rep * 100 + T)
    kv_heads, d, capacity = 2, 16, 640
    # the cache as the models view their stores: [KV, capacity, D] slices of one strided region
    cache = torch.randn(capacity, 2, kv_heads, d, device=device).to(dtype)
    keys, values = (cache[:, kind].permute(1, 0, 2) for kind in (0, 1))
    q = torch.randn(kv_heads, rep * T, d, device=device).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for first in (0, 3, 61, 300, 600 - T):
        pos = torch.tensor([first], device=device)
        span = min(capacity, -(-(first + T) // 128) * 128)
        # several chunks of 64 keys at the longer spans; rows of a window see none of the first ones
        assert kernel.splits(kv_heads, 1, span, q.device) == -(-span // kernel.BLOCK_N)
        got = kernel.triton_grouped_attention(q, keys, values, pos, T, span, window)
        expected = torch_grouped_attention(q.float(), keys.float(), values.float(), pos, T, span, window)
        torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)
        assert torch.equal(kernel.triton_grouped_attention(q, keys, values, pos, T, span, window), got)


def test_rows_past_one_programs_block_take_another(device):
    """80 rows (rep 4, T 20) are two blocks of 64: each block's rows merge to torch's result."""
    from engine.kernels import grouped_attention as kernel

    torch.manual_seed(7)
    kv_heads, d, capacity, T = 1, 16, 256, 20
    keys, values = torch.randn(2, kv_heads, capacity, d, device=device)
    q = torch.randn(kv_heads, 4 * T, d, device=device)
    pos = torch.tensor([100], device=device)
    got = kernel.triton_grouped_attention(q, keys, values, pos, T, 128, None)
    torch.testing.assert_close(got, torch_grouped_attention(q, keys, values, pos, T, 128, None), rtol=1e-5, atol=1e-5)
