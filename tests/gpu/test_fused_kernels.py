"""The fused CUDA kernels against the torch formulas they replace (the CPU path)."""
import pytest
import torch
from torch.nn import functional as F

pytest.importorskip("triton")  # CUDA builds of torch bring it; CPU machines skip this module
from engine.kernels.norm_rope import rms_norm, rope  # noqa: E402
from engine.ops.rope import apply_rope
from engine.transformer import RMSNormF32, StepPositions, TransformerConfig

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


CONFIGS = {
    "temporal": TransformerConfig(d_model=256, num_heads=2, num_layers=2, dim_feedforward=4 * 256, context=6,
                                  norm="rms_norm_f32", gating="silu", rope=True),
    "depformer": TransformerConfig(d_model=128, num_heads=4, num_layers=2, dim_feedforward=4 * 128, context=None,
                                   norm="rms_norm_f32", gating="silu", rope=False, weights_per_step=3,
                                   clock="fixed"),
    "mimi": TransformerConfig(d_model=128, num_heads=4, num_layers=2, dim_feedforward=256, context=5,
                              norm="layer_norm", gating="none", layer_scale=0.1, rope=True, clock="mimi_step"),
}


def _streamed(transformer, xs, fused: bool):
    """The transformer streamed over xs, as fused layers (the CUDA route) or as the torch
    formulas (the CPU route, here on CUDA with the Triton kernels switched off)."""
    from engine.ops import dispatch
    from engine.state import FullStore

    store, outs = FullStore(transformer.regions(), "cuda"), []
    before = dispatch.use_triton  # the one choice every op asks
    dispatch.use_triton = lambda x: fused and x.is_cuda
    try:
        for step, x in enumerate(xs):
            if transformer.cfg.clock != "fixed":
                store.advance(transformer.cfg.clock, x.shape[1])
            outs.append(transformer(x, store, step=step if transformer.cfg.weights_per_step else 0))
    finally:
        dispatch.use_triton = before
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("weights", ["float", "int8", "int4"])
@pytest.mark.parametrize("prologue", ["in the product", "own kernel"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind,T", [("temporal", 1), ("temporal", 2), ("depformer", 1), ("mimi", 2)])
def test_fused_layers_match_the_torch_formulas(kind, T, dtype, prologue, weights, monkeypatch):
    from engine.kernels import fused_linear
    from engine.transformer import StreamingTransformer
    from engine.weights.int4 import int4_layout, quantize_checkpoint4
    from engine.weights.int8 import int8_layout, quantize_checkpoint

    if weights != "float" and kind == "mimi":
        pytest.skip("Mimi's transformer stays in float (only the LM's linears are quantized)")
    monkeypatch.setattr(fused_linear, "SEPARATE_PROLOGUE_BYTES", 0 if prologue == "own kernel" else 1 << 62)

    torch.manual_seed(0)
    cfg = CONFIGS[kind]
    transformer = StreamingTransformer(cfg, "t")
    for p in transformer.parameters():
        p.data.normal_(0, 0.1)
    transformer = transformer.to("cuda", dtype)
    if weights == "int8":  # after the cast: the scales stay fp32
        state = transformer.state_dict()
        transformer.load_state_dict(quantize_checkpoint(state, int8_layout(transformer), torch.device("cuda")))
    if weights == "int4":  # after the cast: the group scales stay bf16
        state = transformer.state_dict()
        transformer.load_state_dict(quantize_checkpoint4(state, int4_layout(transformer), torch.device("cuda")))
    steps = cfg.weights_per_step or 9  # past the ring: slots wrap
    xs = [torch.randn(1, 1 if cfg.weights_per_step else T, cfg.d_model, device="cuda").to(dtype)
          for _ in range(steps)]
    with torch.no_grad():
        expected, got = _streamed(transformer, xs, False), _streamed(transformer, xs, True)
    tol = 2e-5 if dtype == torch.float32 else 4e-2
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)


def test_fused_linear_prologues_and_epilogues():
    from engine.kernels.fused_linear import linear, linear_embed
    from engine.kernels.operands import Norm

    torch.manual_seed(1)
    x = torch.randn(3, 512, device="cuda")
    w = torch.randn(300, 512, device="cuda") / 20
    res, scale = torch.randn(3, 300, device="cuda"), torch.rand(300, device="cuda")
    ln = torch.nn.LayerNorm(512).cuda()
    ln.weight.data.uniform_(0.5, 1.5)
    ln.bias.data.normal_()
    got = linear(x, w, norm=Norm("layer", ln.weight, ln.bias, ln.eps), residual=res, scale=scale)
    torch.testing.assert_close(got, res + scale * (ln(x) @ w.T), rtol=1e-5, atol=1e-5)
    gate = torch.randn(3, 1024, device="cuda")
    got = linear(gate, w, act="silu_gate")
    torch.testing.assert_close(got, (F.silu(gate[:, :512]) * gate[:, 512:]) @ w.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(linear(x, w, act="gelu"), F.gelu(x) @ w.T, rtol=1e-5, atol=1e-5)
    table = torch.randn(7, 300, device="cuda")
    for token in (4, 0, -1):
        got = linear_embed(x[:1], w, table, torch.tensor([token], device="cuda"))
        row = table[token] if token >= 0 else torch.zeros(300, device="cuda")
        torch.testing.assert_close(got, x[:1] @ w.T + row, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vocab,top_k", [(2048, 250), (100, 100), (2048, 1)])
def test_topk_sampling_kernel_draws_as_the_torch_path(vocab, top_k):
    from engine.kernels.topk_sampling import topk_sample

    logits = torch.randn(64, vocab, device="cuda") * 4
    g = torch.Generator("cuda").manual_seed(3)
    got = topk_sample(logits, top_k, 0.8, g)
    g = torch.Generator("cuda").manual_seed(3)
    probs, candidates = torch.topk(torch.softmax(logits / 0.8, dim=-1), top_k, dim=-1)
    race = probs / torch.empty_like(probs).exponential_(1, generator=g)
    expected = candidates.gather(-1, race.argmax(dim=-1, keepdim=True)).view(-1)
    assert torch.equal(got, expected)
