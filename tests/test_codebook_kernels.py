"""The quantizer's kernels (engine.kernels.codebooks) under Triton's interpreter on the CPU (or
on CUDA): each codebook's choice is the nearest centroid to what the codebooks before it left,
ties to the lower index; the decoded sum is the torch formula's, bit for bit."""
import pytest
import torch

from engine.ops import codebooks as torch_path
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


@pytest.mark.parametrize("n,bins,dim,rows", [(3, 2048, 256, 1), (4, 100, 32, 5), (1, 7, 3, 2)])
def test_each_choice_is_the_nearest_centroid_to_the_residual(device, n, bins, dim, rows):
    from engine.kernels.codebooks import nearest

    gen = torch.Generator().manual_seed(bins + rows)
    centroids = torch.randn(n, bins, dim, generator=gen)
    x = torch.randn(rows, dim, generator=gen)
    codes = nearest(x.to(device), centroids.to(device)).cpu()
    assert codes.shape == (n, rows) and codes.dtype == torch.int64
    residual = x
    for table, chosen in zip(centroids, codes):
        exact = ((table.double()[None] - residual.double()[:, None]) ** 2).sum(-1)  # [rows, bins]
        best = exact.min(dim=1).values
        assert torch.all(exact.gather(1, chosen[:, None])[:, 0] <= best * (1 + 1e-5) + 1e-9)
        assert torch.equal(chosen, exact.argmin(dim=1))  # random data: no near ties
        residual = residual - table[chosen]
    assert torch.equal(codes, torch_path.nearest_codes(x, centroids))


def test_a_tie_goes_to_the_lower_index_and_the_next_codebook_sees_the_choice(device):
    from engine.kernels.codebooks import nearest

    centroids = torch.zeros(2, 40, 4)
    centroids[0, 7] = centroids[0, 31] = torch.tensor([1.0, 2.0, 0.0, 0.0])  # the same, twice
    centroids[1] = torch.arange(40.0)[:, None] * torch.tensor([0.0, 0.0, 1.0, 0.0])
    x = torch.tensor([[1.0, 2.0, 5.2, 0.0]])  # codebook 0 leaves (0, 0, 5.2, 0): centroid 5 of codebook 1
    assert nearest(x.to(device), centroids.to(device)).cpu().tolist() == [[7], [5]]


@pytest.mark.parametrize("n,bins,dim,rows", [(8, 2048, 256, 1), (3, 50, 1500, 4)])
def test_the_sum_of_the_chosen_centroids_is_the_torch_formulas(device, n, bins, dim, rows):
    from engine.kernels.codebooks import summed

    gen = torch.Generator().manual_seed(dim)
    centroids = torch.randn(n, bins, dim, generator=gen)
    codes = torch.randint(0, bins, (n, rows), generator=gen)
    got = summed(codes.to(device), centroids.to(device)).cpu()
    assert torch.equal(got, torch_path.summed_centroids(codes, centroids))
