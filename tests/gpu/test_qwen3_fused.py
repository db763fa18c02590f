"""The MiniCPM-o LLM's fused layers at Qwen3-8B's width (a few layers, random weights): the heads kernel
gives the torch formulas' queries and cache rows, a fused pass gives torch's ops' logits within bf16
noise (the RMSNorms round once fewer), and it replays from its graphs bit for bit as it runs eagerly."""
import pytest
import torch

from bench.qwen3_passes import CONFIG, HIDDEN, llm_weights
from engine.families.minicpmo.qwen3 import CLOCK, Qwen3Model, head_rms_norm, rotate_half
from engine.families.minicpmo.qwen3_weights import stack_products
from engine.ops.fused import heads_into_cache
from engine.options import RuntimeOptions
from engine.runtime.stages import StageRunner
from engine.state.placement import new_store

pytestmark = pytest.mark.gpu

LAYERS = 3
DEVICE = torch.device("cuda")
CAPACITY = 1024


def _models():
    config = dict(CONFIG, num_hidden_layers=LAYERS)
    weights = llm_weights(LAYERS, DEVICE)
    plain = Qwen3Model(config, weights, DEVICE, torch.bfloat16, capacity=CAPACITY)
    stack_products(weights, "llm.model.layers.", LAYERS)
    fused = Qwen3Model(config, weights, DEVICE, torch.bfloat16, capacity=CAPACITY)
    assert fused.fuses and not plain.fuses
    return plain, fused


def test_the_heads_kernel_is_the_torch_formulas():
    heads, kv, d, rows, first = 32, 8, 128, 3, 700
    g = torch.Generator(device=DEVICE).manual_seed(0)
    qkv = (torch.randn(rows, (heads + 2 * kv) * d, generator=g, device=DEVICE) * 2).to(torch.bfloat16)
    q_norm, k_norm = (1 + 0.1 * torch.randn(2, d, generator=g, device=DEVICE)).to(torch.bfloat16)
    model = Qwen3Model(dict(CONFIG, num_hidden_layers=1), llm_weights(1, DEVICE), DEVICE, torch.bfloat16,
                       capacity=CAPACITY)
    keys, values = (torch.zeros(kv, CAPACITY, d, dtype=torch.bfloat16, device=DEVICE) for _ in range(2))
    position = torch.tensor([first], device=DEVICE)
    grouped = heads_into_cache(qkv, q_norm, k_norm, 1e-6, model.cos_table, model.sin_table, position, keys, values,
                               heads)
    cos, sin = model.cos_table[first:first + rows], model.sin_table[first:first + rows]
    q, k, v = qkv.split([heads * d, kv * d, kv * d], dim=1)
    q = head_rms_norm(q.view(rows, heads, d), q_norm, 1e-6).transpose(0, 1)
    k = head_rms_norm(k.view(rows, kv, d), k_norm, 1e-6).transpose(0, 1)
    q, k = ((t * cos) + (rotate_half(t) * sin) for t in (q, k))
    assert torch.equal(values[:, first:first + rows], v.view(rows, kv, d).transpose(0, 1))
    # The fp32 sum of squares in another order moves a rounding now and then by one bf16 step.
    for ours, theirs in ((grouped, q.reshape(kv, -1, d)), (keys[:, first:first + rows], k)):
        assert torch.allclose(ours.float(), theirs.float(), rtol=1e-2, atol=1e-2)
        assert (ours == theirs).float().mean() > 0.99
    assert not keys[:, :first].any() and not keys[:, first + rows:].any()


@pytest.mark.parametrize("rows", [1, 2, 10, 40])
def test_a_fused_pass_is_within_bf16_noise_of_torch_ops(rows):
    plain, fused = _models()
    g = torch.Generator(device=DEVICE).manual_seed(rows)
    for model in (plain, fused):
        model.forward(torch.randn(300, HIDDEN, generator=g, device=DEVICE).to(torch.bfloat16))  # a context
        g.manual_seed(rows)
    x = torch.randn(rows, HIDDEN, generator=g, device=DEVICE).to(torch.bfloat16)
    (logits, hidden), (their_logits, their_hidden) = fused.forward(x), plain.forward(x)
    for ours, theirs in ((logits, their_logits), (hidden, their_hidden)):
        assert torch.isfinite(ours).all()
        assert (ours.float() - theirs.float()).norm() <= 0.02 * theirs.float().norm()
    assert (logits.argmax(-1) == their_logits.argmax(-1)).float().mean() >= 0.9


def test_fused_passes_replay_as_they_run():
    options = RuntimeOptions(graph_replay=True)
    config = dict(CONFIG, num_hidden_layers=LAYERS)
    store = new_store(Qwen3Model.regions(config, torch.bfloat16, CAPACITY), DEVICE, options)
    runner = StageRunner(store, DEVICE, None, options)
    weights = llm_weights(LAYERS, DEVICE)
    stack_products(weights, "llm.model.layers.", LAYERS)
    replayed = Qwen3Model(config, weights, DEVICE, torch.bfloat16, capacity=CAPACITY, runner=runner)
    eager = Qwen3Model(config, weights, DEVICE, torch.bfloat16, capacity=CAPACITY)
    store.ensure({CLOCK: CAPACITY})
    from engine.kernels import split_sums  # Triton: only where the GPU tests run

    with torch.cuda.stream(runner.graphs.capture_stream()):
        split_sums.ready(DEVICE)
    torch.cuda.synchronize()
    for span in (512, 1024):
        for count in (1, 2, 10):
            replayed.position.zero_()
            runner.prepare([replayed.stage(count, span)])
    replayed.reset()
    runner.reset()
    g = torch.Generator(device=DEVICE).manual_seed(1)
    for n, count in enumerate([7] + [1, 10, 2] * 4):
        rows = torch.randn(count, HIDDEN, generator=g, device=DEVICE).to(torch.bfloat16)
        for name, a, b in zip(("logits", "hidden"), replayed.forward(rows), eager.forward(rows), strict=True):
            assert torch.isfinite(a).all(), f"pass {n} ({count} rows) replayed: non-finite {name}"
            assert torch.equal(a, b), f"pass {n} ({count} rows): replayed {name} differ from eager"
    assert runner.eager_runs == 1


def test_stacking_gives_the_freed_parts_back():
    """The parts a stack replaces are freed segments that no later stack fits in: they go back to the
    device, so the process holds the weights and not twice the stacked products."""
    weights = llm_weights(LAYERS, DEVICE)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    held = torch.cuda.memory_reserved(DEVICE)
    stack_products(weights, "llm.model.layers.", LAYERS)
    assert torch.cuda.memory_allocated(DEVICE) <= held
    assert torch.cuda.memory_reserved(DEVICE) <= held + 2 ** 21
