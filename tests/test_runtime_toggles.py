"""The DuplexCadence invariant on CPU: demand-sized state, on from the start or switched at
any frame, gives bit-identical tokens, text and PCM, and tracks the conversation. (Graph
replay needs CUDA: its exactness is tested in tests/gpu/test_session_cuda.py.)

CPU runs the demand-sized placement's emulation, which poisons every entry a CUDA store
would not have mapped with NaN: output that stays bit-identical proves nothing unbacked
was read. A small-context copy of the demo model makes every KV ring wrap in the test.
"""

import numpy as np
import pytest

from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import PLAIN, assert_identical, demo_with, run

FRAMES = 40
PERSONA = Persona("DEMO", "Be brief.")


@pytest.fixture(scope="module")
def small_context_model(tmp_path_factory):
    return demo_with(tmp_path_factory.mktemp("demo_ctx"), {"context": 12}, {"context": 10})


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES, seed=11).reshape(FRAMES, -1)


@pytest.fixture(scope="module")
def baseline(small_context_model, audio):
    return run(DuplexSession(small_context_model, RuntimeOptions(seed=2, **PLAIN), PERSONA), audio)


def test_demand_sized_state_is_bit_identical(small_context_model, audio, baseline):
    options = RuntimeOptions(seed=2, graph_replay=False, demand_sized_state=True)
    assert_identical(run(DuplexSession(small_context_model, options, PERSONA), audio), baseline)


def test_switching_placement_mid_conversation_is_bit_identical(small_context_model, audio, baseline):
    off = RuntimeOptions(seed=2, **PLAIN)
    on = off.replace(demand_sized_state=True)
    session = DuplexSession(small_context_model, off, PERSONA)
    assert_identical(run(session, audio, {5: on, 17: off, 18: on, 33: off}), baseline)


def test_demand_sized_state_follows_the_clock_and_stops_at_retention(small_context_model, audio):
    plain = DuplexSession(small_context_model, RuntimeOptions(**PLAIN), PERSONA)
    demand = DuplexSession(small_context_model, RuntimeOptions(), PERSONA)
    sizes = []
    for frame in audio:
        demand.step(frame)
        sizes.append(demand.state_bytes())
    assert sizes == sorted(sizes), "state only grows within a conversation"
    assert sizes[-1] == sizes[-10], "rings stop growing once they hold their retention"
    assert sizes[-1] <= plain.state_bytes()
    demand.reset()
    assert demand.state_bytes() < sizes[0]


def test_demo_state_at_ten_seconds_is_a_fraction_of_full_retention(audio):
    # The demo keeps 3000 frames of temporal KV: 125 frames (10 s) need about 4% of it.
    model = load_model("demo")
    plain = DuplexSession(model, RuntimeOptions(**PLAIN), PERSONA)
    demand = DuplexSession(model, RuntimeOptions(), PERSONA)
    for frame in np.tile(audio, (4, 1))[:125]:
        demand.step(frame)
    kv = "lm.transformer.kv"
    assert demand.store.nbytes(kv) < 0.1 * plain.store[kv].numel() * plain.store[kv].element_size()


def test_a_prepared_session_gives_what_a_fresh_one_gives(small_context_model, audio, baseline):
    """prepare() runs frames of silence (where a GPU compiles and captures) and starts over:
    nothing of it reaches the conversation, with either placement."""
    for demand in (False, True):
        session = DuplexSession(small_context_model, RuntimeOptions(seed=2, graph_replay=False,
                                                                    demand_sized_state=demand), PERSONA)
        session.prepare()
        assert session.conversation.frame.frames > 0  # the prompts ran again after the silence
        assert_identical(run(session, audio), baseline)
