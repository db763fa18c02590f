"""The many-row product kernel (engine.kernels.rows_linear) against the torch formulas, under
Triton's interpreter on the CPU (or on CUDA): float, int8 and int4 weights, each prologue and
epilogue, LoRA rows; and a DiffuPlex-shaped wake of the demo LM through the fused layers
against the torch layers."""
import json

import pytest
import torch
from torch.nn import functional as F

from engine.families.moshi.diffuplex.predictor import new_predictor
from engine.families.moshi.lm import load_lm
from engine.families.moshi.lm.lm_config import from_lm_kwargs
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from engine.kernels.operands import Norm
from engine.ops.linear import matmul
from engine.ops.norm import rms_norm
from engine.ops.rope import apply_rope, coefficient, tables
from engine.state import FullStore
from engine.transformer import StepPositions
from tests.kernel_weights import random_weight
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _lora(k: int, n: int, rows: int, dtype: torch.dtype, device: str, scale: float = 2.0):
    a = (torch.randn(8, k) / k ** 0.5).to(dtype).to(device)
    b = (torch.randn(n, 8) / 8).to(dtype).to(device)
    return a, b, scale, rows


def _corrected(y: torch.Tensor, x: torch.Tensor, lora) -> torch.Tensor:
    """The predictor's add_delta on the last rows (engine.families.diffuplex.predictor)."""
    a, b, scale, rows = lora
    if scale != 1.0:
        b = b * scale
    y[-rows:].addmm_((x[-rows:].to(a.dtype) @ a.T).to(y.dtype), b.T.to(y.dtype))
    return y


def _close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, bf16_tol: float = 2 ** -7) -> None:
    # Equal up to the order of the fp32 sums: a bf16 value may round to a neighbour (and a
    # neighbour of the product to another neighbour after each later rounding).
    got, expected = got.float().cpu(), expected.float().cpu()
    tol = 1e-5 if dtype == torch.float32 else bf16_tol
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol * expected.abs().max().item())


@pytest.mark.parametrize("rows", [9, 17, 32])
@pytest.mark.parametrize("kind", ["float", "int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_with_a_residual_and_lora_rows_match_the_torch_formulas(rows, kind, dtype, device):
    from engine.kernels import rows_linear

    torch.manual_seed(rows)
    n, k = 40, 136  # 136: a partial last int4 group and K chunk
    w = random_weight(kind, n, k, dtype, device)
    x = torch.randn(rows, k).to(dtype).to(device)
    residual = torch.randn(rows, n).to(dtype).to(device)
    scale = torch.rand(n).to(dtype).to(device)
    lora = _lora(k, n, rows // 2, dtype, device)
    _close(rows_linear.linear(x, w), matmul(x, w), dtype)
    y = _corrected(matmul(x, w), x, lora)
    _close(rows_linear.linear(x, w, lora=lora), y, dtype)
    _close(rows_linear.linear(x, w, residual=residual, scale=scale, lora=lora), residual + scale * y, dtype)


@pytest.mark.parametrize("rows", [1, 5])
def test_a_product_of_several_rows_reads_its_weights_once(rows, device, monkeypatch):
    """engine.ops.linear (the LM's heads): one row through the matrix-vector kernel, more (a
    wake's text head) through the rows kernel, whose result it returns."""
    from engine.kernels import fused_linear, rows_linear
    from engine.ops import linear as ops_linear

    monkeypatch.setattr(ops_linear.dispatch, "use_triton", lambda x: True)  # the interpreter's CPU tensors too
    ran = []

    def noted(module):  # the kernel still runs: only which one ran is noted
        real = module.linear
        return lambda x, w: ran.append(module.__name__) or real(x, w)

    for module in (fused_linear, rows_linear):
        monkeypatch.setattr(module, "linear", noted(module))
    torch.manual_seed(rows)
    w = random_weight("float", 40, 136, torch.bfloat16, device)
    x = torch.randn(1, rows, 136).to(torch.bfloat16).to(device)
    got = ops_linear.linear(x, w)
    assert ran == [(rows_linear if rows > 1 else fused_linear).__name__]
    assert got.shape == (1, rows, 40)
    _close(got[0], matmul(x[0], w), torch.bfloat16)


@pytest.mark.parametrize("kind", ["float", "int8", "int4"])
def test_few_outputs_split_k_and_sum_the_splits_in_order(kind, device):
    """40 outputs of 2056 inputs: K is split (and the prologue and the LoRA's down-projection
    too), the splits' partials summed by the last program of each tile to finish; equal to the
    torch formulas, and to itself bit for bit."""
    from engine.kernels import rows_linear

    torch.manual_seed(11)
    dtype, rows, n, k = torch.bfloat16, 17, 40, 2056
    assert rows_linear._config(rows, n, k, dtype, 64 if kind == "int4" else None).split > 1
    w = random_weight(kind, n, k, dtype, device)
    x = torch.randn(rows, k).to(dtype).to(device)
    residual = torch.randn(rows, n).to(dtype).to(device)
    lora = _lora(k, n, 8, dtype, device)
    got = rows_linear.linear(x, w, residual=residual, lora=lora)
    _close(got, residual + _corrected(matmul(x, w), x, lora), dtype)
    assert torch.equal(rows_linear.linear(x, w, residual=residual, lora=lora), got)
    gain = (torch.rand(k) + 0.5).to(dtype).to(device)  # the prologue's rows written span by span
    h = rms_norm(x[None], gain, 1e-8)[0]
    _close(rows_linear.linear(x, w, norm=Norm("rms", gain, None, 1e-8), lora=lora), _corrected(matmul(h, w), h, lora),
           dtype)


@pytest.mark.parametrize("act", [None, "silu_gate"])
@pytest.mark.parametrize("kind", ["float", "int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_split_product_with_no_prologue_projects_its_lora_down_itself(act, kind, dtype, device, monkeypatch):
    """K split (a wake's attention output): with float weights and no prologue the product
    projects the LoRA rows down in an extra column of programs, with no lead launch; int8 and
    int4 weights, and the FFN's activation, keep the lead. Equal to the torch formulas."""
    from engine.kernels import rows_linear

    leads, real = [], rows_linear._lead
    monkeypatch.setattr(rows_linear, "_lead", lambda *args: leads.append(args) or real(*args))
    torch.manual_seed(12)
    rows, n, k = 9, 40, 2056
    assert rows_linear._config(rows, n, k, dtype, 64 if kind == "int4" else None).split > 1
    w = random_weight(kind, n, k, dtype, device)
    x = torch.randn(rows, 2 * k if act else k).to(dtype).to(device)
    h = F.silu(x[:, :k]) * x[:, k:] if act else x
    residual = torch.randn(rows, n).to(dtype).to(device)
    lora = _lora(k, n, 4, dtype, device)
    got = rows_linear.linear(x, w, act=act, residual=residual, lora=lora)
    _close(got, residual + _corrected(matmul(h, w), h, lora), dtype)
    assert len(leads) == (kind != "float" or act is not None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_rows_over_several_iterations_and_a_partial_last_group(dtype, device):
    """520 inputs: iterations of four groups, the last holding one group of 8 inputs and two
    groups wholly past the row, whose scales must not be read."""
    from engine.kernels import rows_linear

    torch.manual_seed(4)
    w = random_weight("int4", 24, 520, dtype, device)
    x = torch.randn(17, 520).to(dtype).to(device)
    _close(rows_linear.linear(x, w), matmul(x, w), dtype)


@pytest.mark.parametrize("prologue", ["rms", "layer", "silu_gate", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_prologue_feeds_the_product_and_the_lora(prologue, dtype, device):
    from engine.kernels import rows_linear

    torch.manual_seed(3)
    rows, n, k = 17, 24, 72
    w = random_weight("float", n, k, dtype, device)
    x = torch.randn(rows, 2 * k if prologue == "silu_gate" else k).to(dtype).to(device)
    gain, bias = (torch.rand(k) + 0.5).to(dtype).to(device), torch.randn(k).to(dtype).to(device)
    norm, act, h = None, None, None
    if prologue == "rms":
        norm, h = Norm("rms", gain, None, 1e-8), rms_norm(x[None], gain, 1e-8)[0]
    elif prologue == "layer":
        norm, h = Norm("layer", gain, bias, 1e-5), F.layer_norm(x, (k,), gain, bias, 1e-5)
    elif prologue == "silu_gate":
        act, h = prologue, F.silu(x[:, :k]) * x[:, k:]
    else:
        act, h = prologue, F.gelu(x)
    lora = _lora(k, n, 8, dtype, device, scale=1.0)
    _close(rows_linear.linear(x, w, norm=norm, act=act, lora=lora), _corrected(matmul(h, w), h, lora), dtype)


@pytest.mark.parametrize("rows", [9, 17])
@pytest.mark.parametrize("kind", ["float", "int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qkv_rows_are_corrected_rotated_and_written_round_the_ring(rows, kind, dtype, device):
    from engine.kernels import rows_linear

    torch.manual_seed(rows + 1)
    heads, d, k, ring, first = 2, 8, 64, 20, 15  # the rows wrap round the ring
    w = random_weight(kind, 3 * heads * d, k, dtype, device)
    x = torch.randn(rows, k).to(dtype).to(device)
    alpha = (torch.rand(k) + 0.5).to(dtype).to(device)
    lora = _lora(k, 3 * heads * d, rows // 2, dtype, device)
    kv = torch.zeros(ring, 2, heads, d, dtype=dtype, device=device)
    pos = torch.tensor([first], device=device)
    q = rows_linear.qkv_into_ring(x, w, Norm("rms", alpha, None, 1e-8), pos, kv, heads,
                                  coefficient(d, 10000.0), lora)
    h = rms_norm(x[None], alpha, 1e-8)[0]
    qkv = _corrected(matmul(h, w), h, lora).view(1, rows, 3, heads, d).permute(2, 0, 3, 1, 4)
    rope = tables(pos + torch.arange(rows, device=device), d, 10000.0)
    eq, ek = apply_rope(qkv[0], rope), apply_rope(qkv[1], rope)
    # bf16: the product, the corrected product and the rotation each round: up to 3 neighbours.
    _close(q, eq, dtype, 2 ** -5)
    slots = (first + torch.arange(rows)) % ring
    _close(kv[slots, 0].transpose(0, 1), ek[0], dtype, 2 ** -5)
    _close(kv[slots, 1].transpose(0, 1), qkv[2][0], dtype, 2 ** -6)
    written = torch.zeros(ring, dtype=torch.bool)
    written[slots] = True
    assert (kv.cpu()[~written] == 0).all()  # nothing outside the rows' slots


@pytest.mark.parametrize("future", [2, 4, 8])  # 5 rows: few, but corrected, so rows_linear's too
@torch.no_grad()
def test_a_wake_through_the_fused_layers_is_the_torch_layers_wake(future, device):
    """History of 5 positions, then a wake of catch-up + current + `future` masked positions
    (2K + 1 rows: 5, 9 and 17) with the LoRA on the last `future`: the fused layers (forced, as
    on CUDA) give the torch layers' output and KV, up to the order of the fp32 sums. In fp32:
    in bf16 two layers of neighbour roundings differ from torch's by more than one product's
    (as much with fused_linear's rows as with these), which the tests above bound per product."""
    dtype = torch.float32
    kwargs = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    lm = load_lm(DEMO_MODEL_DIR / LM_NAME, from_lm_kwargs({**kwargs, "context": 12}, "demo", "demo"))
    lm = lm.to(device=device, dtype=dtype)
    predictor = new_predictor(lm.cfg, block=future).to(device=device, dtype=dtype)
    for b in predictor.lora_b.values():
        # untrained B is zero: no correction (drawn on the CPU: the same values on CUDA)
        b.copy_(torch.empty(b.shape).normal_(0, 0.3, generator=torch.Generator().manual_seed(5)))
    transformer, adapter = lm.transformer, predictor.at_last(future)
    gen = torch.Generator().manual_seed(7)
    history = torch.randn(1, 5, lm.cfg.dim, generator=gen).to(device=device, dtype=dtype)
    wake = torch.randn(1, future + 1 + future, lm.cfg.dim, generator=gen).to(device=device, dtype=dtype)
    stores = [FullStore(transformer.regions(wake.shape[1]), device) for _ in range(2)]
    for store in stores:
        transformer(history, store)
    expected = transformer(wake, stores[0], adapter=adapter, keep=future + 1)

    store = stores[1]
    first, ring = store[transformer.pos_region], store[transformer.kv_region].shape[0]
    pos = StepPositions.at(first, wake.shape[1], transformer.cfg, ring, fused=True)
    got = wake
    for layer in transformer.layers:
        got = layer(got, pos, store, 0, adapter)
    _close(got, expected, dtype)
    _close(store[transformer.kv_region], stores[0][transformer.kv_region], dtype)


@pytest.mark.parametrize("context", [12, None])
def test_ring_attention_kernel_takes_a_wake_of_17_queries(context, device):
    """TRITON_MAX_T covers a wake's rows: the split-K kernel at 17 queries (one program per
    query; nothing in it bounds T) gives torch's ring attention, across a wrap of the ring."""
    from engine.kernels.ring_attention_triton import triton_ring_attention
    from engine.ops.attention import torch_ring_attention

    torch.manual_seed(17)
    heads, d, ring, T = 2, 8, 30, 17
    kv = torch.randn(ring, 2, heads, d, device=device)
    q = torch.randn(1, heads, T, d, device=device)
    pos = torch.tensor([25], device=device)  # entries 25 .. 41 wrap round the ring
    _close(triton_ring_attention(q, kv, pos, T, context), torch_ring_attention(q, kv, pos, T, context),
           torch.float32)
