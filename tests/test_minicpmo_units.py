"""MiniCPM-o's unit protocol end to end against the reference's golden trace
(packaging/make_minicpmo_golden.py): the tiny checkpoint in the official layout loaded by the
family, each recorded run replayed unit by unit — the encoder's rows, the decision and every
decoded token, the unit's text, the TTS's condition and its 25 speech tokens — with the same
generator draws (seeded once, the LLM's and the TTS's in the reference's order) and the same
forcing (a bias on the logits the decoder receives, as the script adds it)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from engine.families.minicpmo.model import load
from engine.families.minicpmo.protocol_settings import UnitSettings
from engine.families.minicpmo.units import UnitProtocol

GOLDEN = Path(__file__).parent / "golden"
FOLDER = GOLDEN / "minicpmo_tiny"
META = json.loads((GOLDEN / "minicpmo_tiny_trace.json").read_text())
RUNS = [run for run in META["runs"] if run != "long"]


@pytest.fixture(scope="module")
def trace():
    with safe_open(str(GOLDEN / "minicpmo_tiny_trace.safetensors"), framework="pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118


@pytest.fixture(scope="module")
def model():
    return load(FOLDER, None, torch.device("cpu"), torch.float32)


def _settings(spec: dict) -> UnitSettings:
    generate = spec["generate"]
    duplex = spec["spec"].get("duplex", {})
    return UnitSettings(force_listen_count=duplex.get("force_listen_count", 0), decode_mode=generate["decode_mode"],
                        temperature=generate["temperature"], top_k=generate["top_k"], top_p=generate["top_p"],
                        listen_prob_scale=generate["listen_prob_scale"], listen_top_k=generate["listen_top_k"],
                        text_repetition_penalty=generate["text_repetition_penalty"],
                        text_repetition_window_size=generate["text_repetition_window_size"],
                        length_penalty=generate["length_penalty"], sliding_window_mode="off")


@pytest.mark.parametrize("run", RUNS)
def test_a_run_replays_the_reference_token_for_token(run, trace, model):
    from engine.families.minicpmo.audio_encoder import StreamingAudioEncoder
    from engine.families.minicpmo.conversation import system_prompt
    from engine.families.minicpmo.qwen3 import Qwen3Model
    from engine.families.minicpmo.speech_tokens import SpeechTokenGenerator

    spec = META["runs"][run]
    w = model.weights_by_name
    encoder = StreamingAudioEncoder(model.config, w, "cpu", torch.float32)
    llm = Qwen3Model(model.config, w, "cpu", torch.float32, capacity=1024)
    units = UnitProtocol(llm, model.tokens, _settings(spec))
    tts = SpeechTokenGenerator(model.config, w, "cpu", torch.float32)
    pcm = trace["audio.pcm16"]
    if spec["spec"].get("prompt"):  # the system prompt around 2 s of a reference voice, as the demo's prepare
        reference = encoder.encode_reference((pcm[6:8].reshape(-1).float() / 32768).numpy())
        torch.testing.assert_close(reference, trace[f"{run}.ref_embeds"], rtol=0, atol=1e-5)
        units.prepare(*system_prompt(""), reference_rows=reference)
    else:
        units.prepare()
    prompt = trace[f"{run}.prompt_ids"]
    assert llm.length == len(prompt)
    rng = torch.get_rng_state()
    units.decoder.warm_up(llm.sizes.vocab, torch.device("cpu"))  # as a replayed conversation's prepare: no trace
    assert torch.equal(torch.get_rng_state(), rng)

    bias = {(int(u), int(s), int(t)): float(v) for (u, s, t), v in zip(trace[f"{run}.bias_at"].tolist(),
                                                                         trace[f"{run}.bias_value"].tolist())}
    at = {"unit": 0, "step": 0}
    decode = units.decoder.decode

    def biased(logits, generator):
        for (u, s, token), value in bias.items():
            if (u, s) == (at["unit"], at["step"]):
                logits = logits.clone()
                logits[0, token] += value
        at["step"] += 1
        return decode(logits, generator)

    units.decoder.decode = biased
    generator = torch.Generator().manual_seed(META["seed"])
    for i, facts in enumerate(spec["units"]):
        at.update(unit=i, step=0)
        rows = encoder.encode((pcm[i % len(pcm)].float() / 32768).numpy())
        torch.testing.assert_close(rows, trace[f"audio.u{i}.embeds"], rtol=0, atol=1e-5)
        units.prefill(rows)
        interrupt = "override" in facts["actions"]
        result = units.generate(generator, interrupt=interrupt)
        where = f"{run} unit {i}"
        recorded = trace.get(f"{run}.u{i}.step_tokens", torch.zeros(0, dtype=torch.long)).tolist()
        assert result.listen == facts["is_listen"], where
        assert result.end_of_turn == facts["end_of_turn"], where
        assert result.text == facts["text"], where
        assert at["step"] == len(recorded), where
        if not result.listen:
            ids = [token for token, _ in result.spoken]
            assert ids == trace[f"{run}.u{i}.tts_text_ids"].tolist(), where
            hidden = torch.cat([h for _, h in result.spoken]) if ids else torch.zeros(0, llm.sizes.hidden)
            # fp32 noise: our attention reads a masked span of the cache, the reference's exactly its length.
            torch.testing.assert_close(hidden, trace[f"{run}.u{i}.tts_hidden"], rtol=1e-4, atol=1e-5)
            condition = tts.condition(ids, hidden)
            torch.testing.assert_close(condition, trace[f"{run}.u{i}.tts_condition"].reshape(condition.shape),
                                       rtol=1e-4, atol=1e-5)
            assert tts.length == facts["tts_text_start_pos"] or facts["tts_text_start_pos"] == 0, where
            speech = tts.generate(condition, generator, end_of_turn=result.end_of_turn)
            assert list(speech) == trace[f"{run}.u{i}.tts_tokens"].tolist(), where
        units.finalize()
    assert llm.length == len(trace[f"{run}.fed_ids"])


def test_the_basic_window_keeps_the_context_bounded_and_the_system_prompt(model):
    """sliding_window_mode "basic": over the high mark, whole units go, oldest first, until
    under the low mark; the system prompt stays (a long conversation keeps bounded positions)."""
    from engine.families.minicpmo.conversation import system_prompt
    from engine.families.minicpmo.qwen3 import Qwen3Model

    settings = UnitSettings(sliding_window_mode="basic", basic_window_high_tokens=120, basic_window_low_tokens=90,
                            force_listen_count=2)
    llm = Qwen3Model(model.config, model.weights_by_name, "cpu", torch.float32, capacity=256)
    units = UnitProtocol(llm, model.tokens, settings)
    units.prepare(*system_prompt(""))
    prompt = llm.length
    kept_prompt = llm.keys[:, :, :prompt].clone()
    generator = torch.Generator().manual_seed(1)
    rows = torch.randn(10, llm.sizes.hidden, generator=generator)
    lengths = []
    for _ in range(40):
        units.prefill(rows)
        units.generate(generator)
        units.finalize()
        lengths.append(llm.length)
        assert llm.length <= 120
    assert max(lengths) > 90 and min(lengths[10:]) >= 90 - 40  # it filled up, then slid
    assert units.system_length == prompt and llm.length == prompt + sum(units.unit_lengths)
    assert torch.equal(llm.keys[:, :, :prompt], kept_prompt)  # the system prompt's cache is untouched


def test_every_stage_prepare_captures_runs_within_the_caches(model):
    """`prepare` runs (and, on a GPU, captures: its warm-up runs the work again) every pass and
    draw a unit can make before a conversation. Run here as it runs them, twice each: each stays
    within the caches and a unit's draws; then a conversation starts from the first position and
    its units write the buffers prepare made (under the session's no_grad, not inference_mode)."""
    from engine.families.minicpmo.conversation import MiniCPMOConversation
    from engine.options import RuntimeOptions
    from engine.persona import Persona

    generator = torch.Generator().manual_seed(0)
    conversation = MiniCPMOConversation(model, generator, RuntimeOptions(), Persona())
    ran, furthest = [], []

    def twice(stage):
        for _ in range(2):
            conversation.runner.run(stage, replay=False)
        ran.append(stage.key)
        furthest.append((int(conversation.llm.position), int(conversation.tts.step)))

    conversation.prepare_stages(twice)
    assert len(set(ran)) == len(ran) > 3 * 2  # the LLM's three shapes and the TTS's, at every span
    assert max(p for p, _ in furthest) <= conversation.llm.capacity
    assert max(s for _, s in furthest) <= conversation.tts.drawn.numel()
    conversation.reset(RuntimeOptions(), lambda: False, None)
    with torch.no_grad():
        for _ in range(2):
            conversation.step(torch.zeros(16000), RuntimeOptions(), lambda stage: None)
