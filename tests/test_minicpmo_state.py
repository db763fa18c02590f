"""MiniCPM-o's encoder, LLM and TTS caches as declared state: in a demand-sized store (here the CPU emulation,
whose unbacked positions read as NaN) each backs the positions its clock has reached and the span a
pass reads ahead of them, no more (the TTS's clock restarting with each turn); a conversation says
the same, token for token and sample for sample, in either placement and when the placement changes
mid-conversation. And a decision drawn from non-finite logits stops with a message."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.families.minicpmo.audio_encoder import ENCODER_CLOCK, ENCODER_KV
from engine.families.minicpmo.conversation import MiniCPMOConversation
from engine.families.minicpmo.model import load
from engine.families.minicpmo.qwen3 import CLOCK, KV, SPAN
from engine.families.minicpmo.speech_tokens import TTS_CLOCK, TTS_KV
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.state import FullStore
from engine.state.demand import DemandStore

from .test_minicpmo_units import FOLDER

UNITS = 8


@pytest.fixture(scope="module")
def model():
    return load(FOLDER, None, torch.device("cpu"), torch.float32)


def _speech() -> list[torch.Tensor]:
    rng = np.random.default_rng(3)
    return [torch.from_numpy(rng.standard_normal(16000).astype(np.float32) * 0.1) for _ in range(UNITS)]


def _conversation(model, options: RuntimeOptions, change_at: int | None = None, to: RuntimeOptions | None = None):
    conversation = MiniCPMOConversation(model, torch.Generator().manual_seed(7), options, Persona())
    conversation.reset(options, lambda: False, None)
    said, backed = [], []
    with torch.no_grad():
        for i, pcm in enumerate(_speech()):
            if i == change_at:
                assert conversation.change(options, to) is None
                options = to
            tokens, speech, report = conversation.step(pcm, options, lambda stage: None)
            said.append((report.listen, report.text, tokens.tolist(), None if speech is None else speech.clone()))
            store = conversation.runner.store
            backed.append((store.ticks(KV), store.nbytes("llm"), conversation.llm.length,
                           store.ticks(TTS_KV), store.nbytes("tts"), conversation.tts.length,
                           store.ticks(ENCODER_KV), store.nbytes("encoder"), conversation.encoder.past))
    return conversation, said, backed


def _same(a: list, b: list) -> None:
    for unit, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x[:3] == y[:3], f"unit {unit}: {x[:3]} != {y[:3]}"
        assert (x[3] is None) == (y[3] is None) and (x[3] is None or torch.equal(x[3], y[3])), f"unit {unit}'s audio"


def test_the_cache_backs_what_the_clock_has_reached(model):
    conversation, said, backed = _conversation(model, RuntimeOptions())
    store = conversation.runner.store
    assert isinstance(store, DemandStore)
    region, tts, encoder = store.regions[KV], store.regions[TTS_KV], store.regions[ENCODER_KV]
    assert region.clock == CLOCK and tts.clock == TTS_CLOCK and encoder.clock == ENCODER_CLOCK
    assert store.reserved_bytes() == region.bytes_full() + tts.bytes_full() + encoder.bytes_full()
    for ticks, nbytes, length, tts_ticks, tts_bytes, tts_length, enc_ticks, enc_bytes, past in backed:
        # What each clock has reached is held; the masked span read past it costs nothing.
        assert enc_ticks == past and enc_bytes == past * encoder.entry_bytes()
        assert ticks == length  # no window drop yet: every position fed is held
        assert nbytes == ticks * region.entry_bytes()
        assert tts_ticks >= tts_length  # a unit's draws after an early EOS are not kept
        assert tts_bytes == tts_ticks * tts.entry_bytes()
    ticks = store.ticks(KV)  # the span read ahead reads zeros (as the device's shared granule), past it nothing
    assert (store[KV][ticks:ticks + SPAN - 1] == 0).all() and torch.isnan(store[KV][ticks + SPAN - 1:]).all()
    assert backed[-1][1] < region.bytes_full() / 2
    assert any(not listen for listen, *_ in said)  # it spoke too: the TTS read the LLM's states
    assert max(b[3] for b in backed) > 0


def test_the_tts_clock_restarts_with_each_turn(model):
    """A turn's end empties the TTS's cache: its clock back to zero, nothing backed; the next turn's
    first unit backs it again."""
    from engine.families.minicpmo.speech_tokens import SpeechTokenGenerator
    from engine.runtime.stages import StageRunner
    from engine.state.placement import new_store

    options = RuntimeOptions()
    regions = SpeechTokenGenerator.regions(model.config, torch.float32, 1024)
    runner = StageRunner(new_store(regions, torch.device("cpu"), options), torch.device("cpu"), None, options)
    tts = SpeechTokenGenerator(model.config, model.weights_by_name, "cpu", torch.float32, capacity=1024,
                               runner=runner)
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(5, model.config["hidden_size"], generator=generator)
    condition = tts.condition([11, 12, 13, 14, 15], hidden)
    tts.generate(condition, generator)
    assert runner.store.ticks(TTS_KV) == 6 + 25 and runner.store.nbytes("tts") > 0
    tts.generate(condition, generator, end_of_turn=True)
    assert tts.length == 0 and runner.store.ticks(TTS_KV) == 0 and runner.store.nbytes("tts") == 0
    assert len(tts.generate(condition, generator)) > 0 and runner.store.ticks(TTS_KV) == 6 + 25


def test_either_placement_says_the_same(model):
    _, demand, _ = _conversation(model, RuntimeOptions())
    full, in_full, _ = _conversation(model, RuntimeOptions(demand_sized_state=False))
    assert isinstance(full.runner.store, FullStore)
    _same(demand, in_full)
    moved, changed, _ = _conversation(model, RuntimeOptions(), change_at=UNITS // 2,
                                      to=RuntimeOptions(demand_sized_state=False))
    assert isinstance(moved.runner.store, FullStore)
    _same(demand, changed)


def test_non_finite_logits_stop_with_a_message(model):
    """On CUDA a draw from NaN fails with a device-side assert that leaves the process's CUDA context
    unusable; the decoder says what went wrong first."""
    conversation, _, _ = _conversation(model, RuntimeOptions())
    logits = torch.zeros(1, conversation.llm.sizes.vocab)
    logits[0, 5] = float("nan")
    with pytest.raises(ValueError, match="non-finite logits"):
        conversation.units.decoder.decode(logits, torch.Generator().manual_seed(0))
