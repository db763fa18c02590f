"""MiniCPM-o 4.5's Qwen3 LLM (engine/families/minicpmo/qwen3.py) against the reference's own code.

tests/golden/minicpmo_llm.safetensors (packaging/make_minicpmo_llm_golden.py) holds transformers 4.51's
Qwen3ForCausalLM, a tiny random config, driven through the reference's StreamDecoder with the "basic" sliding
window dropping units: every feed call's embeds, the logits and hidden rows it returned, each drop. We replay
the calls and drops and compare. The shared duplex trace (tests/golden/minicpmo_tiny_trace.safetensors, the tiny
MiniCPM-o checkpoint) is replayed from its record of the cache's contents against each decode step's logits and
the TTS hidden rows. The rest checks what needs no reference: chunking, truncate, the drop's re-rotation, loading.
"""
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from engine.errors import CheckpointError
from engine.families.minicpmo.qwen3 import Qwen3Model
from engine.families.minicpmo.qwen3_weights import llm_weights

GOLDEN = Path(__file__).resolve().parent / "golden"
OWN = GOLDEN / "minicpmo_llm.safetensors"
TINY = GOLDEN / "minicpmo_tiny"
TRACE = GOLDEN / "minicpmo_tiny_trace.safetensors"
# CPU, same operations in the same order: fp32 agrees to float noise (0 here); bf16 to a few bf16 ulps.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (6e-2, 6e-2)}  # (logits, hidden)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny shapes: one thread is fastest, and on a busy machine each parallel region can wait out a time slice."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def golden():
    with safe_open(str(OWN), "pt") as f:
        configs = json.loads(f.metadata()["configs"])
        return configs, {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not iterable)


def weights_of(record: dict) -> dict:
    return {k.removeprefix("weights/"): v for k, v in record.items() if k.startswith("weights/")}


def replay(model: Qwen3Model, record: dict, run: str) -> tuple[float, float]:
    """Feed the run's calls in order, applying its drops; return the worst (logits, hidden) differences."""
    chunks = record[f"{run}/feed_embeds"].split(record[f"{run}/feed_lengths"].tolist())
    drops = record[f"{run}/drops"].tolist()
    expected = dict(zip(record[f"{run}/feed_logits_calls"].tolist(), record[f"{run}/feed_logits"]))
    hidden_rows = record[f"{run}/feed_hidden"]  # every row of the calls that returned logits
    worst_logits = worst_hidden = 0.0
    row = 0
    for call, embeds in enumerate([*chunks, None]):
        for _, preserve, length in (d for d in drops if d[0] == call):
            model.drop(preserve, length)
        if embeds is None:
            break
        logits, hidden = model.forward(embeds.to(model.dtype))
        if call in expected:
            worst_logits = max(worst_logits, (logits[-1] - expected[call]).abs().max().item())
            want, row = hidden_rows[row:row + len(embeds)], row + len(embeds)
            worst_hidden = max(worst_hidden, (hidden.float() - want).abs().max().item())
    assert model.length == int(record[f"{run}/feed_lengths"].sum()) - sum(d[2] for d in drops)
    return worst_logits, worst_hidden


@pytest.mark.parametrize(("run", "dtype"), [("fp32", torch.float32), ("window", torch.float32),
                                            ("bf16", torch.bfloat16)])
def test_matches_the_reference_stream_decoder(golden, run, dtype):
    configs, record = golden
    assert len(record[f"{run}/drops"]) > 0  # the basic window did drop units
    model = Qwen3Model(configs[run], weights_of(record), "cpu", dtype, capacity=64)
    worst_logits, worst_hidden = replay(model, record, run)
    assert worst_logits <= TOLERANCE[dtype][0] and worst_hidden <= TOLERANCE[dtype][1], (worst_logits, worst_hidden)


def replay_trace(model: Qwen3Model, trace: dict, run: str) -> tuple[float, float]:
    """Feed a duplex run's cache contents (`fed_ids`: token ids, -1 for encoder rows) one token or one audio
    block per call; compare each decode step's logits (top ids, probe ids, log-sum-exp, full rows where kept)
    and the TTS hidden rows. Step 0 reads the logits after the unit's audio, step k those after the k-th token
    fed during generate; TTS hidden i is the hidden after generate token i + 1 (the first one is skipped)."""
    fed = trace[f"{run}.fed_ids"].tolist()
    units = sorted({int(k.split(".")[1][1:]) for k in trace if k.startswith(f"{run}.u")})
    blocks = [trace[f"{run}.ref_embeds"]] if f"{run}.ref_embeds" in trace else []
    blocks += [trace[f"audio.u{u}.embeds"] for u in units]
    logits_at, hidden_at, audio_ends = {}, {}, []
    i = 0
    while i < len(fed):
        n = next((j for j in range(i, len(fed)) if fed[j] != -1), len(fed)) - i if fed[i] == -1 else 1
        embeds = blocks[len(audio_ends)] if fed[i] == -1 else model.embed(torch.tensor(fed[i:i + 1]))
        assert len(embeds) == n
        logits, hidden = model.forward(embeds, last_only=True)
        i += n
        logits_at[i - 1], hidden_at[i - 1] = logits[0], hidden[-1]
        if fed[i - 1] == -1:
            audio_ends.append(i - 1)
    audio_ends = audio_ends[len(audio_ends) - len(units):]
    probe = trace["probe_ids"]
    worst_logits = worst_hidden = 0.0
    for u, end in zip(units, audio_ends):
        p = f"{run}.u{u}"
        generate = trace[f"{p}.fed_generate"].tolist()
        assert fed[end + 1:end + 1 + len(generate)] == generate
        for k in range(len(trace.get(f"{p}.step_tokens", []))):
            ours = logits_at[end + k]
            diffs = [ours[trace[f"{p}.logits_top_ids"][k]] - trace[f"{p}.logits_top_values"][k],
                     ours[probe] - trace[f"{p}.logits_probe"][k], ours.logsumexp(-1) - trace[f"{p}.logits_lse"][k]]
            if f"{p}.logits_full.s{k}" in trace:
                diffs.append(ours - trace[f"{p}.logits_full.s{k}"])
            worst_logits = max(worst_logits, *(d.abs().max().item() for d in diffs))
        for n, row in enumerate(trace.get(f"{p}.tts_hidden", [])):
            worst_hidden = max(worst_hidden, (hidden_at[end + 2 + n] - row).abs().max().item())
    return worst_logits, worst_hidden


def test_matches_the_shared_duplex_trace():
    if not TRACE.exists():
        pytest.skip("the shared trace is not recorded yet")
    with safe_open(str(TRACE), "pt") as f:
        trace = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not iterable)
    config = json.loads((TINY / "config.json").read_text())
    weights = {}
    for shard in sorted(TINY.glob("*.safetensors")):
        weights.update({k: v.float() for k, v in load_file(shard).items() if k.startswith("llm.")})
    runs = sorted(k.removesuffix(".fed_ids") for k in trace if k.endswith(".fed_ids"))
    assert runs
    for run in runs:
        model = Qwen3Model(config, weights, "cpu", torch.float32, capacity=256)
        worst_logits, worst_hidden = replay_trace(model, trace, run)
        assert worst_logits <= 1e-4 and worst_hidden <= 2e-5, (run, worst_logits, worst_hidden)


@pytest.fixture(scope="module")
def tiny(golden):
    configs, record = golden
    return configs["fp32"], weights_of(record)


def model_of(tiny, **kw) -> Qwen3Model:
    config, weights = tiny
    return Qwen3Model(config, weights, "cpu", torch.float32, capacity=kw.pop("capacity", 48), **kw)


def test_chunked_feeding_equals_one_prefill(tiny):
    embeds = torch.randn(20, tiny[0]["hidden_size"], generator=torch.Generator().manual_seed(3))
    whole = model_of(tiny)
    logits, hidden = whole.forward(embeds)
    chunked = model_of(tiny)
    parts = [chunked.forward(part) for part in embeds.split([6, 1, 1, 5, 1, 6])]
    assert torch.allclose(torch.cat([p[0] for p in parts]), logits, atol=1e-5)
    assert torch.allclose(torch.cat([p[1] for p in parts]), hidden, atol=1e-5)
    last, _ = model_of(tiny).forward(embeds, last_only=True)
    assert last.shape == (1, logits.shape[1]) and torch.allclose(last[0], logits[-1], atol=1e-5)


def test_truncate_then_refeed_and_reset(tiny):
    g = torch.Generator().manual_seed(4)
    a, b, c = (torch.randn(n, tiny[0]["hidden_size"], generator=g) for n in (5, 4, 3))
    model = model_of(tiny)
    model.forward(a)
    model.forward(b)
    model.truncate(5)
    got, _ = model.forward(c)
    fresh = model_of(tiny)
    fresh.forward(a)
    want, _ = fresh.forward(c)
    assert model.length == 8 and torch.allclose(got, want, atol=1e-6)
    model.reset()
    again, _ = model.forward(a)
    first, _ = model_of(tiny).forward(a)
    assert model.length == 5 and torch.equal(again, first)
    with pytest.raises(ValueError):
        model.truncate(6)


def test_drop_re_rotates_the_kept_keys_to_their_new_positions(tiny):
    # Layer 0's keys and values depend on a row and its position alone: after dropping rows [3, 7) the kept
    # suffix must hold what a fresh cache fed the kept rows holds.
    embeds = torch.randn(12, tiny[0]["hidden_size"], generator=torch.Generator().manual_seed(5))
    model = model_of(tiny)
    model.forward(embeds)
    model.drop(3, 4)
    kept = torch.cat([embeds[:3], embeds[7:]])
    fresh = model_of(tiny)
    fresh.forward(kept)
    assert model.length == 8
    assert torch.allclose(model.keys[0, :, :8], fresh.keys[0, :, :8], atol=1e-5)
    assert torch.equal(model.values[0, :, :8], fresh.values[0, :, :8])
    model.drop(8, 0)  # nothing
    model.drop(5, 3)  # a drop that leaves no suffix
    assert model.length == 5 and torch.equal(model.values[0, :, :5], fresh.values[0, :, :5])
    with pytest.raises(ValueError):
        model.drop(3, 3)


def test_capacity_and_loader(tiny):
    config, weights = tiny
    with pytest.raises(ValueError, match="capacity"):
        model_of(tiny, capacity=4).forward(torch.zeros(5, config["hidden_size"]))
    loaded = llm_weights(weights)
    assert len(loaded.layers) == config["num_hidden_layers"] and loaded.lm_head is weights["llm.lm_head.weight"]
    tied = {k: v for k, v in weights.items() if k != "llm.lm_head.weight"}
    assert llm_weights(tied).lm_head is tied["llm.model.embed_tokens.weight"]
    model = Qwen3Model({**config, "tie_word_embeddings": True}, tied, "cpu", torch.float32, capacity=8)
    assert model.lm_head_weight is model.embed_weight
    with pytest.raises(CheckpointError, match="lm_head"):
        Qwen3Model(config, tied, "cpu", torch.float32, capacity=8)
    with pytest.raises(CheckpointError, match="q_norm"):
        llm_weights({k: v for k, v in weights.items() if "layers.1.self_attn.q_norm" not in k})
    ids = torch.tensor([0, 5, 63])
    assert torch.equal(model.embed(ids), weights["llm.model.embed_tokens.weight"][ids])
