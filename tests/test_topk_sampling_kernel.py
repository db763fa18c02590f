"""The one-kernel top-k sampler (engine.kernels.topk_sampling) under Triton's interpreter on the
CPU (or on CUDA) against the torch path's formula with the same generator: the same token
every row, ties (frequent among bf16 logits) and probabilities that underflow included."""
import pytest
import torch

from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _torch_path(logits: torch.Tensor, top_k: int, temperature: float, seed: int) -> torch.Tensor:
    """The torch path's race, its top k ranked by a stable sort: ties in the lower index first
    (torch.topk leaves their order open, and bf16 logits tie often)."""
    g = torch.Generator(logits.device).manual_seed(seed)
    probs, candidates = torch.sort(torch.softmax(logits.float() / temperature, dim=-1), dim=-1,
                                   descending=True, stable=True)
    probs, candidates = probs[:, :top_k], candidates[:, :top_k]
    race = probs / torch.empty_like(probs).exponential_(1, generator=g)
    return candidates.gather(-1, race.argmax(dim=-1, keepdim=True)).view(-1)


@pytest.mark.parametrize("vocab,top_k", [(2048, 250), (100, 100), (300, 1)])
def test_the_kernel_draws_the_torch_paths_token(vocab, top_k, device):
    from engine.kernels import topk_sampling

    torch.manual_seed(vocab + top_k)
    logits = torch.randn(6, vocab) * 4
    logits[1] = (logits[1] * 2).round() / 2  # many equal probabilities: ties go to the lower index
    logits[2, :vocab // 2] = -1e4  # probabilities that underflow to zero
    logits = logits.to(torch.bfloat16).to(device)
    for seed in range(3):
        g = torch.Generator(device).manual_seed(seed)
        got = topk_sampling.topk_sample(logits, top_k, 0.8, g)
        assert torch.equal(got.cpu(), _torch_path(logits, top_k, 0.8, seed).cpu())
