"""MiniCPM-o 4.5's speech-token generator (engine.families.minicpmo.speech_tokens).

A tiny random TTS checks the duplex rules (25 tokens mid-turn, 26 draws, EOS only at a turn's first unit
or its end, the cache carried across units and emptied at a turn end); the golden trace, once recorded
(packaging/make_minicpmo_golden.py), checks condition rows and tokens against the reference's own run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from engine.families.minicpmo.speech_tokens import SpeechTokenGenerator, tts_weights

GOLDEN = Path(__file__).parent / "golden"
TTS = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
           max_position_embeddings=256, num_audio_tokens=40, num_text_tokens=100, audio_bos_token_id=97, llm_dim=12)
EOS = TTS["num_audio_tokens"] - 1


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, inner, llm, kv = TTS["hidden_size"], TTS["intermediate_size"], TTS["llm_dim"], 8  # kv: 2 heads of 4

    def rand(*shape, std=0.3):
        return torch.randn(*shape, generator=g) * std

    w = {"emb_text.weight": rand(TTS["num_text_tokens"], h, std=1.0), "emb_code.0.weight": rand(40, h, std=1.0),
         "head_code.0.parametrizations.weight.original0": rand(40, 1).abs() + 2.0,
         "head_code.0.parametrizations.weight.original1": rand(40, h), "model.norm.weight": 1 + rand(h, std=0.1),
         "projector_semantic.linear1.weight": rand(h, llm), "projector_semantic.linear1.bias": rand(h),
         "projector_semantic.linear2.weight": rand(h, h), "projector_semantic.linear2.bias": rand(h),
         "projector_spk.linear1.weight": rand(h, llm), "model.embed_tokens.weight": rand(8, h)}
    for i in range(TTS["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w |= {p + "self_attn.q_proj.weight": rand(h, h), p + "self_attn.k_proj.weight": rand(kv, h),
              p + "self_attn.v_proj.weight": rand(kv, h), p + "self_attn.o_proj.weight": rand(h, h),
              p + "mlp.gate_proj.weight": rand(inner, h), p + "mlp.up_proj.weight": rand(inner, h),
              p + "mlp.down_proj.weight": rand(h, inner), p + "input_layernorm.weight": 1 + rand(h, std=0.1),
              p + "post_attention_layernorm.weight": 1 + rand(h, std=0.1)}
    return {"tts." + k: v for k, v in w.items()} | {"llm.model.norm.weight": torch.ones(4)}


def _generator(weights=None, capacity=None) -> SpeechTokenGenerator:
    return SpeechTokenGenerator({"tts_config": TTS}, weights or _weights(), "cpu", torch.float32, capacity)


def _inputs(n: int, seed: int) -> tuple[list[int], torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randint(0, 90, (n,), generator=g).tolist(), torch.randn(n, TTS["llm_dim"], generator=g)


def _after_draws(state: torch.Tensor, draws: int) -> torch.Tensor:
    """A generator's state after `draws` one-sample draws over the audio vocabulary (what a draw consumes
    does not depend on the probabilities)."""
    g = torch.Generator()
    g.set_state(state)
    for _ in range(draws):
        torch.multinomial(torch.ones(1, TTS["num_audio_tokens"]), 1, generator=g)
    return g.get_state()


def test_weight_norm_spellings_resolve_alike():
    w = _weights()
    g, v = (w[f"tts.head_code.0.parametrizations.weight.original{i}"] for i in (0, 1))
    new = tts_weights(w)
    old = tts_weights({k: t for k, t in w.items() if "parametrizations" not in k}
                      | {"tts.head_code.0.weight_g": g, "tts.head_code.0.weight_v": v})
    assert torch.allclose(new["head_code.0.weight"], g * v / v.norm(dim=1, keepdim=True), atol=1e-6)
    assert torch.equal(new["head_code.0.weight"], old["head_code.0.weight"])
    assert "llm.model.norm.weight" not in new and not any("original" in k for k in new)


def test_condition_rows():
    w, tts = _weights(), _generator()
    ids, hidden = _inputs(5, 0)

    def p(name):
        return w["tts.projector_semantic." + name]

    projected = F.linear(F.relu(F.linear(hidden, p("linear1.weight"), p("linear1.bias"))),
                         p("linear2.weight"), p("linear2.bias"))
    text = w["tts.emb_text.weight"]
    expected = torch.cat([text[ids] + projected / projected.norm(dim=-1, keepdim=True), text[[97]]])
    assert torch.allclose(tts.condition(ids, hidden), expected, atol=1e-6)
    assert torch.equal(tts.condition([], torch.zeros(0, TTS["llm_dim"])), text[[97]])


def test_units_of_a_turn():
    tts, g = _generator(), torch.Generator().manual_seed(7)
    expected_length = 0
    for u, (n, end_of_turn) in enumerate([(3, False), (5, False), (0, False), (4, True), (2, False), (6, False)]):
        cond = tts.condition(*_inputs(n, u))
        first = tts.length == 0
        state = g.get_state()
        tokens = tts.generate(cond, g, end_of_turn=end_of_turn)
        assert EOS not in tokens and all(0 <= t < EOS for t in tokens)
        if not (first or end_of_turn):
            assert len(tokens) == 25  # min_new_tokens 26 masks the EOS
        assert torch.equal(g.get_state(), _after_draws(state, len(tokens) + 1))  # the last draw is never kept
        expected_length = 0 if end_of_turn else expected_length + n + 1 + len(tokens)
        assert tts.length == expected_length


def test_cache_carries_across_units():
    tts = _generator()
    g = torch.Generator().manual_seed(3)
    cond_a, cond_b = tts.condition(*_inputs(4, 1)), tts.condition(*_inputs(6, 2))
    tokens_a = tts.generate(cond_a, g)
    trace: list[torch.Tensor] = []
    tokens_b = tts.generate(cond_b, g, trace=trace)
    assert len(tokens_b) == 25 and len(trace) == 26

    def embedded(tokens):
        return F.embedding(torch.tensor(tokens, dtype=torch.long), tts.emb_code)

    fresh = _generator()  # the whole turn in one causal pass from position 0
    for rows, logits in (([cond_a, embedded(tokens_a), cond_b], trace[0]),
                         ([cond_a, embedded(tokens_a), cond_b, embedded(tokens_b)], trace[-1])):
        hidden = fresh._forward(torch.cat(rows), 0)
        assert torch.allclose(F.linear(hidden, fresh.head)[0], logits, atol=1e-5)


def test_eos_only_where_allowed():
    w = _weights()
    # Output projections zero: the final hidden is the input row's direction; every input row points along
    # dimension 0, and only the EOS head row reads it: the EOS is all but certain whenever it is unmasked.
    for name in [k for k in w if k.endswith(("o_proj.weight", "down_proj.weight"))]:
        w[name] = torch.zeros_like(w[name])
    e0 = F.one_hot(torch.tensor(0), TTS["hidden_size"]).float()
    w["tts.emb_code.0.weight"] = e0.expand(40, -1).clone()
    w["tts.emb_text.weight"][97] = e0
    del w["tts.head_code.0.parametrizations.weight.original0"], w["tts.head_code.0.parametrizations.weight.original1"]
    w["tts.head_code.0.weight"] = torch.zeros(40, TTS["hidden_size"])
    w["tts.head_code.0.weight"][EOS, 0] = 40.0
    w["tts.model.norm.weight"] = torch.ones(TTS["hidden_size"])
    tts, g = _generator(w), torch.Generator().manual_seed(1)
    state = g.get_state()
    assert tts.generate(tts.condition([], torch.zeros(0, 12)), g) == []  # a turn's first unit: EOS at once
    assert tts.length == 1 and torch.equal(g.get_state(), _after_draws(state, 1))
    tokens = tts.generate(tts.condition(*_inputs(2, 0)), g)  # mid-turn: masked, 25 tokens regardless
    assert len(tokens) == 25 and EOS not in tokens and tts.length == 1 + 3 + 25
    assert tts.generate(tts.condition([], torch.zeros(0, 12)), g, end_of_turn=True) == []
    assert tts.length == 0


def test_repetition_penalty():
    tts = _generator()
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    assert torch.equal(tts._penalise(logits), logits)  # a unit's first draw: nothing to look back on
    tts.drawn[:3] = torch.tensor([0, 0, 1])
    tts.step.fill_(3)  # the fourth draw looks back on the three before it
    out = tts._penalise(logits)
    assert torch.allclose(out, torch.tensor([[2.0 / 1.05 ** 2, -2.0 * 1.05, 1.0, 0.5]]))
    tts.drawn[3:20] = 3
    tts.step.fill_(19)  # the window is the last 16: drawn[3:19], the first three out of it
    assert torch.allclose(tts._penalise(logits), torch.tensor([[2.0, -2.0, 1.0, 0.5 / 1.05 ** 16]]))


def test_turn_longer_than_the_cache_is_refused():
    tts, g = _generator(capacity=40), torch.Generator().manual_seed(0)
    tts.generate(tts.condition(*_inputs(3, 0)), g)  # 4 + at most 25 positions
    with pytest.raises(RuntimeError, match="longer than the cache"):
        tts.generate(tts.condition(*_inputs(12, 1)), g)  # 13 + 25 more


def test_golden_trace():
    """Every run of the reference's own trace (packaging/make_minicpmo_golden.py) replayed on one generator
    per run: each TTS unit's condition rows, its head logits (the recorded top 16 per step) and its tokens,
    drawn from the reference's RNG state at the call; where the cache stood (tts_text_start_pos) too."""
    path = GOLDEN / "minicpmo_tiny_trace.safetensors"
    if not path.exists():
        pytest.skip("the golden trace is not recorded yet")
    from safetensors.torch import load_file

    trace, runs = load_file(path), json.loads(path.with_suffix(".json").read_text())["runs"]
    ckpt = GOLDEN / "minicpmo_tiny"
    config = json.loads((ckpt / "config.json").read_text())
    weights = {}
    for shard in sorted(ckpt.glob("model-*.safetensors")):
        weights |= {k: t.float() for k, t in load_file(shard).items() if k.startswith("tts.")}
    checked = 0
    for run, record in runs.items():
        tts = SpeechTokenGenerator(config, weights, "cpu", torch.float32, capacity=512)  # a run's turns: < 256
        for unit in record["units"]:
            p = f"{run}.u{unit['unit']}."
            if p + "tts_tokens" not in trace:
                continue
            assert tts.length == unit["tts_text_start_pos"], p
            cond = tts.condition(trace[p + "tts_text_ids"], trace[p + "tts_hidden"])
            torch.testing.assert_close(cond, trace[p + "tts_condition"], atol=1e-6, rtol=1e-4)  # fp32 noise
            g = torch.Generator()
            g.set_state(trace[p + "tts_rng"])
            logits: list[torch.Tensor] = []
            tokens = tts.generate(cond, g, end_of_turn=unit["end_of_turn"], trace=logits)
            assert tokens == trace[p + "tts_tokens"].tolist(), p
            top_ids = trace[p + "tts_logits_top_ids"]
            ours = torch.stack(logits).gather(1, top_ids)
            torch.testing.assert_close(ours, trace[p + "tts_logits_top_values"], atol=1e-4, rtol=1e-5)
            checked += 1
    assert checked > 0


def test_a_draw_is_torch_multinomials():
    """speech_tokens.draw: the reference's torch.multinomial draw, token and generator state alike."""
    from engine.families.minicpmo.speech_tokens import draw

    for seed in range(50):
        probs = torch.softmax(3 * torch.randn(1, 4097, generator=torch.Generator().manual_seed(seed + 99)), -1)
        a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(torch.multinomial(probs, 1, generator=a), draw(probs, b))
        assert torch.equal(a.get_state(), b.get_state())
