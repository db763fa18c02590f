"""MiniCPM-o's LLM cache as declared state: in a demand-sized store (here the CPU emulation, whose
unbacked positions read as NaN) it backs the positions the clock has reached and the span a pass
reads ahead of them, no more; a conversation says the same, token for token and sample for sample,
in either placement and when the placement changes mid-conversation. And a decision drawn from
non-finite logits stops with a message."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.families.minicpmo.conversation import MiniCPMOConversation
from engine.families.minicpmo.model import load
from engine.families.minicpmo.qwen3 import CLOCK, KV, SPAN
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
            backed.append((store.ticks(KV), store.nbytes("llm"), conversation.llm.length))
    return conversation, said, backed


def _same(a: list, b: list) -> None:
    for unit, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x[:3] == y[:3], f"unit {unit}: {x[:3]} != {y[:3]}"
        assert (x[3] is None) == (y[3] is None) and (x[3] is None or torch.equal(x[3], y[3])), f"unit {unit}'s audio"


def test_the_cache_backs_what_the_clock_has_reached(model):
    conversation, said, backed = _conversation(model, RuntimeOptions())
    store = conversation.runner.store
    assert isinstance(store, DemandStore)
    region = store.regions[KV]
    assert region.clock == CLOCK and store.reserved_bytes() == region.bytes_full()
    for ticks, nbytes, length in backed:
        assert ticks == length  # no window drop yet: every position fed is held
        assert nbytes == min(ticks + SPAN - 1, region.retain) * region.entry_bytes()
    assert backed[-1][1] < region.bytes_full() / 2
    assert any(not listen for listen, *_ in said)  # it spoke too: the TTS read the LLM's states


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
