"""The split-K ring attention kernel (engine.kernels.ring_attention_triton) with its queries' keys
split over many programs, under Triton's interpreter on the CPU (or on CUDA): the last of a
query's programs to finish merges the partial results into torch's ring attention (or a merge
launch, for the kernel serving all queries at once), chunks without a key included."""
import pytest
import torch

from engine.ops.attention import torch_ring_attention
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


@pytest.mark.parametrize("context", [200, None])
@pytest.mark.parametrize("T", [1, 3])
def test_split_keys_merge_to_torchs_attention(T, context, device):
    from engine.kernels import ring_attention_triton as kernel

    torch.manual_seed(T)
    heads, d, ring = 2, 16, 300
    kv = torch.randn(ring, 2, heads, d, device=device)
    q = torch.randn(1, heads, T, d, device=device)
    # 19 chunks of 16 keys at the longest run; early positions leave most chunks without a key.
    assert kernel._splits(heads, T, ring if context is None else context, 16, q.device, 16) > 4
    for first in (0, 5, 40, 290, 555):
        pos = torch.tensor([first], device=device)
        got = kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16, per_query=True)
        torch.testing.assert_close(got, torch_ring_attention(q, kv, pos, T, context), rtol=1e-5, atol=1e-5)
        assert torch.equal(kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16, per_query=True), got)


@pytest.mark.parametrize("context", [200, None])
@pytest.mark.parametrize("T", [2, 9, 17])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_wakes_queries_read_each_key_once_and_keep_their_own_windows(T, context, dtype, device):
    """per_query=False (the default from QUERIES_FROM queries): one program per head and chunk
    of keys serves all T queries on the tensor cores, each query masked to its own window;
    torch's attention within fp32 (or the bf16 rounding of P), and the same bits again."""
    from engine.kernels import ring_attention_triton as kernel

    torch.manual_seed(T)
    heads, d, ring = 2, 16, 300
    kv = torch.randn(ring, 2, heads, d, device=device).to(dtype)
    q = torch.randn(1, heads, T, d, device=device).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for first in (0, 5, 40, 290, 555):
        pos = torch.tensor([first], device=device)
        got = kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16, per_query=False)
        expected = torch_ring_attention(q.float(), kv.float(), pos, T, context)
        torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)
        assert torch.equal(kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16, per_query=False), got)
        grouped = T >= kernel.QUERIES_FROM  # a wake's rows take this kernel, Mimi's two queries the split one
        chosen = kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16, waves=kernel.QUERIES_WAVES,
                                              per_query=not grouped)
        assert torch.equal(kernel.triton_ring_attention(q, kv, pos, T, context, block_n=16,
                                                        waves=kernel.QUERIES_WAVES), chosen)
    small = kv[:32]  # one chunk of 32 keys: a single split writes the output itself
    assert kernel._splits(heads, 1, 32, 32, q.device, 16) == 1
    one = kernel.triton_ring_attention(q, small, pos, T, context, block_n=32, per_query=False)
    torch.testing.assert_close(one.float(), torch_ring_attention(q.float(), small.float(), pos, T, context),
                               rtol=tol, atol=tol)


def test_heads_too_narrow_for_the_tensor_cores_keep_one_program_a_query(device):
    """tl.dot multiplies at least 16 deep: a wake's queries over heads of 8 dimensions (a small
    test model's) take the split kernel, which the default gives bit for bit."""
    from engine.kernels import ring_attention_triton as kernel

    torch.manual_seed(8)
    kv, q = torch.randn(64, 2, 2, 8, device=device), torch.randn(1, 2, 9, 8, device=device)
    pos = torch.tensor([40], device=device)
    got = kernel.triton_ring_attention(q, kv, pos, 9, None)
    assert torch.equal(got, kernel.triton_ring_attention(q, kv, pos, 9, None, per_query=True))
    torch.testing.assert_close(got, torch_ring_attention(q, kv, pos, 9, None), rtol=1e-5, atol=1e-5)
