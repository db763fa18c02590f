"""The input embedding's kernel (engine.kernels.stream_embeddings) under Triton's interpreter on
the CPU (or on CUDA): each stream's row for its token (the zero row for -1) summed in order,
bit for bit the torch formula's, for float tables and int8 ones."""
import pytest
import torch

from engine.kernels.operands import Int8Rows
from engine.ops.linear import ZERO_TOKEN, chained_sum, embedding_rows
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _tables(streams: int, width: int, dtype, int8: bool, exact: bool, gen):
    """`exact`: quarters small enough that every partial sum is a bf16 number (Triton's
    interpreter rounds fp32 to bf16 toward zero, the GPU and torch to nearest: with nothing to
    round, the interpreter checks the lookups and the zero rows bit for bit; the order of the
    sums, which only rounding shows, is checked on CUDA)."""
    vocab = [30 if s < streams - 1 else 70 for s in range(streams)]  # the last (text) larger
    if int8:
        top = 8 if exact else 128
        return [Int8Rows(torch.randint(-top + 1, top, (v, width), generator=gen, dtype=torch.int8),
                         torch.full((v,), 0.25) if exact else torch.rand(v, generator=gen) / 50) for v in vocab]
    if exact:
        return [(torch.randint(-8, 9, (v, width), generator=gen) / 4).to(dtype) for v in vocab]
    return [(torch.randn(v, width, generator=gen) * 3).to(dtype) for v in vocab]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype,int8,width,rows", [(torch.bfloat16, False, 4096, 1), (torch.float32, False, 96, 3),
                                                    (torch.bfloat16, True, 130, 2)])
def test_the_sum_of_the_streams_rows_is_the_torch_formulas(device, dtype, int8, width, rows, masked):
    """masked: a DiffuPlex wake's future rows, each stream's MASK row where the row does not
    know the stream's token (engine.ops.linear.summed_embeddings' torch formula)."""
    from engine.kernels.stream_embeddings import summed_rows
    from engine.ops.linear import summed_embeddings

    gen = torch.Generator().manual_seed(width)
    tables = _tables(17, width, dtype, int8, device == "cpu", gen)
    tokens = torch.randint(0, 30, (rows, 17), generator=gen)
    tokens[0, 3] = tokens[-1, 16] = ZERO_TOKEN
    known = masks = None
    if masked:
        known = torch.rand(rows, 17, generator=gen) < 0.5
        masks = (torch.randint(-8, 9, (17, width), generator=gen) / 4).to(dtype)
    want = summed_embeddings(tables, tokens, dtype, known, masks)[0]
    if not masked:
        assert torch.equal(want, chained_sum(embedding_rows(tables, tokens, dtype))[0])
    on = [Int8Rows(t.q.to(device), t.scale.to(device)) if int8 else t.to(device) for t in tables]
    got = summed_rows(on, tokens.to(device), dtype, None if known is None else known.to(device),
                      None if masks is None else masks.to(device)).cpu()
    assert got.dtype == dtype and torch.equal(got, want)
