"""The few-row product kernel (engine.kernels.fused_linear) under Triton's interpreter on the
CPU (or on CUDA): its RMSNorm taken in the product's one pass against the torch formula, and
the gated FFN's gate as the first product's epilogue against the gate as the second product's
prologue, bit for bit."""
import pytest
import torch

from engine.kernels.operands import Norm
from engine.ops.linear import matmul
from engine.ops.norm import rms_norm
from tests.kernel_weights import random_weight
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


@pytest.mark.parametrize("weights", ["float", "int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,n,k", [(1, 48, 256), (3, 20, 3000)])  # 3000: a K loop with a ragged end
def test_rms_norm_in_the_product_is_the_torch_formula(rows, n, k, dtype, weights, device):
    from engine.kernels.fused_linear import linear

    torch.manual_seed(rows)
    x = (torch.randn(rows, k) * 3).to(dtype).to(device)
    alpha = torch.empty(1, 1, k).uniform_(0.5, 1.5).to(dtype).to(device)
    w = random_weight(weights, n, k, dtype, device)
    residual = torch.randn(rows, n).to(dtype).to(device)
    got = linear(x, w, norm=Norm("rms", alpha.view(-1), None, 1e-8), residual=residual)
    expected = residual + matmul(rms_norm(x.unsqueeze(0), alpha, 1e-8)[0], w)
    # The torch formula rounds the normalized row to the activations' dtype before its product;
    # the kernel keeps it in fp32 and scales the sums: bf16 results one rounding apart.
    got, expected = got.float().cpu(), expected.float().cpu()
    tol = 1e-5 if dtype == torch.float32 else 2 ** -6
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol * expected.abs().max().item())


@pytest.mark.parametrize("weights", ["float", "int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,hidden,k,norm", [(1, 40, 128, True), (2, 33, 256, False), (8, 64, 96, True)])
def test_the_gate_as_epilogue_is_the_gate_as_prologue(rows, hidden, k, norm, dtype, weights, device):
    """gated(x) against the product stored whole and gated by the next product's prologue
    (fused_linear._prologue, act "silu_gate"): the same bits, so the FFN's output is too."""
    from engine.kernels import fused_linear

    torch.manual_seed(hidden)
    x = torch.randn(rows, k).to(dtype).to(device)
    spec = Norm("rms", torch.empty(k).uniform_(0.5, 1.5).to(dtype).to(device), None, 1e-8) if norm else None
    w = random_weight(weights, 2 * hidden, k, dtype, device)
    got = fused_linear.gated(x, w, spec)
    h = fused_linear.linear(x, w, norm=spec)
    expected = fused_linear._prologue(h, hidden, None, "silu_gate")
    assert got.shape == (rows, hidden)
    assert torch.equal(got.cpu(), expected.cpu())


def test_an_odd_gate_is_refused_by_name(device):
    from engine.kernels.fused_linear import gated

    with pytest.raises(ValueError, match="fused gate: weight \\(7, 16\\)"):
        gated(torch.randn(1, 16, device=device), torch.randn(7, 16, device=device))
