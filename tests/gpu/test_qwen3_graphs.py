"""The MiniCPM-o LLM's passes at Qwen3-8B's width (a few layers, random weights) replay from graphs
captured as `MiniCPMOConversation.prepare` captures them, bit for bit as they run eagerly, and
finite. The tiny checkpoint of the other CUDA tests is too narrow for the rows kernels to split
their sums; at this width they do, and the bench's first full-size run on an H100 gave NaN from
the ten-row pass's graph while the same pass run eagerly gave finite rows."""
import pytest
import torch

from engine.families.minicpmo.qwen3 import CLOCK, Qwen3Model
from engine.options import RuntimeOptions
from engine.runtime.stages import StageRunner
from engine.state.placement import new_store

pytestmark = pytest.mark.gpu

LAYERS = 4
CONFIG = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=LAYERS, num_attention_heads=32,
              num_key_value_heads=8, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
              max_position_embeddings=40960, tie_word_embeddings=False, vocab_size=151936)
SHAPES = {"self_attn.q_proj.weight": (4096, 4096), "self_attn.k_proj.weight": (1024, 4096),
          "self_attn.v_proj.weight": (1024, 4096), "self_attn.o_proj.weight": (4096, 4096),
          "mlp.gate_proj.weight": (12288, 4096), "mlp.up_proj.weight": (12288, 4096),
          "mlp.down_proj.weight": (4096, 12288)}
NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight", "input_layernorm.weight",
         "post_attention_layernorm.weight")


def _weights(device) -> dict[str, torch.Tensor]:
    """Scaled as bench.minicpmo_weights initialises its full-size checkpoint."""
    g = torch.Generator(device=device).manual_seed(0)

    def normal(shape, mean, std):
        return (torch.randn(shape, generator=g, device=device) * std + mean).to(torch.bfloat16)

    w = {"llm.model.embed_tokens.weight": normal((151936, 4096), 0.0, 1.0),
         "llm.lm_head.weight": normal((151936, 4096), 0.0, 3.0 / 64),
         "llm.model.norm.weight": normal((4096,), 1.0, 0.1)}
    for i in range(LAYERS):
        for name, shape in SHAPES.items():
            w[f"llm.model.layers.{i}.{name}"] = normal(shape, 0.0, shape[1] ** -0.5)
        for name in NORMS:
            w[f"llm.model.layers.{i}.{name}"] = normal((128 if "_norm" in name and "attn" in name else 4096,), 1.0, 0.1)
    return w


@pytest.mark.xfail(strict=True, reason="on an H100 the ten-row pass replays NaN here, its counters readied and its "
                   "cache reset as prepare_stages does, while the full-size conversation replays it finite and "
                   "token for token as the reference (bench.minicpmo): not yet understood")
def test_the_unit_passes_replay_as_they_run():
    device = torch.device("cuda")
    weights = _weights(device)
    options = RuntimeOptions(graph_replay=True)
    store = new_store(Qwen3Model.regions(CONFIG, torch.bfloat16, 1024), device, options)
    runner = StageRunner(store, device, None, options)
    replayed = Qwen3Model(CONFIG, weights, device, torch.bfloat16, capacity=1024, runner=runner)
    store.ensure({CLOCK: 1024})  # every span is read from the first position while they are captured
    from engine.kernels import split_sums  # Triton: only where the GPU tests run

    with torch.cuda.stream(runner.graphs.capture_stream()):  # as MiniCPMOConversation._ready_split_sums
        split_sums.ready(device)
    torch.cuda.synchronize()
    eager = Qwen3Model(CONFIG, weights, device, torch.bfloat16, capacity=1024)
    for span in (512, 1024):  # as prepare_stages: each pass from the first position, run then captured
        for count in (1, 2, 10):
            replayed.position.zero_()
            runner.prepare([replayed.stage(count, span)])
    replayed.reset()
    runner.reset()  # as prepare_stages ends: the cache back to no position backed (the captures wrote it)
    g = torch.Generator(device=device).manual_seed(1)
    passes = [7] + [1, 10, 2] * 4  # a system prompt, then each unit's <unit>, its second's rows, its finalize
    for n, count in enumerate(passes):
        rows = torch.randn(count, 4096, generator=g, device=device).to(torch.bfloat16)
        ours, theirs = replayed.forward(rows), eager.forward(rows)
        for name, a, b in zip(("logits", "hidden"), ours, theirs, strict=True):
            assert torch.isfinite(b).all(), f"pass {n} ({count} rows) eagerly: non-finite {name}"
            assert torch.isfinite(a).all(), f"pass {n} ({count} rows) replayed: non-finite {name}"
            assert torch.equal(a, b), f"pass {n} ({count} rows): replayed {name} differ from eager"
    assert runner.eager_runs == 1  # the prompt's seven rows alone: no unit pass ran eagerly
