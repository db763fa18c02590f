"""The fused CUDA kernels against the torch formulas they replace (the CPU path)."""
import pytest
import torch

pytest.importorskip("triton")  # CUDA builds of torch bring it; CPU machines skip this module
from engine.kernels.norm_rope import rms_norm, rope  # noqa: E402
from engine.transformer import RMSNormF32, StepPositions, TransformerConfig, apply_rope

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [1024, 4096, 32])
def test_rms_norm_matches_torch(dtype, dim):
    norm = RMSNormF32(dim)
    norm.alpha.data.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, dim) * 3
    expected = norm(x.to(dtype))  # CPU: the torch formula
    got = rms_norm(x.to(dtype).cuda(), norm.alpha.cuda(), norm.eps).cpu()
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads,head_dim,T", [(32, 128, 1), (8, 64, 2)])
def test_rope_matches_torch_on_strided_views(dtype, heads, head_dim, T):
    cfg = TransformerConfig(d_model=heads * head_dim, num_heads=heads, num_layers=1,
                            dim_feedforward=4, context=10, gating="silu", norm="rms_norm_f32")
    qkv = torch.randn(1, T, 3, heads, head_dim).to(dtype)
    q = qkv.permute(2, 0, 3, 1, 4)[0]  # [1, H, T, D], strided as in the attention
    # The same tables for both: CPU and CUDA cos/sin of large angles differ by ~1e-5 on their own.
    pos = StepPositions.at(torch.tensor([1234]), T, cfg, None)
    expected = apply_rope(q, pos.rope)
    got = rope(qkv.cuda().permute(2, 0, 3, 1, 4)[0], *(t.cuda() for t in pos.rope)).cpu()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol)
