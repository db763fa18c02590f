"""The second family (tests/second_family) on CUDA: its one-second steps give bit-identical
tokens, text and PCM with graph replay and demand-sized state on or off, switched mid-conversation,
and replay really runs its captured graphs (the `speak` stage's too, though it runs only on some
steps)."""
import numpy as np
import pytest

from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.session import DuplexSession
from tests import second_family

pytestmark = pytest.mark.gpu
PERIODS = 110
PLAIN = {"graph_replay": False, "demand_sized_state": False}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(second_family.write(tmp_path_factory.mktemp("models") / "second"), device="cuda")


def _run(model, options: RuntimeOptions, change: RuntimeOptions | None = None, prepare: bool = False):
    session = DuplexSession(model, options)
    if prepare:
        session.prepare()
    rng = np.random.default_rng(3)
    outputs = []
    for i in range(PERIODS):
        if change is not None and i == PERIODS // 2:
            session.set_options(change)
        outputs.append(session.step((0.2 * rng.standard_normal(1920)).astype(np.float32)))
    captured = session.runner.captured
    session.close()
    return outputs, captured


def _same(a, b):
    assert np.array_equal(np.concatenate([o.pcm for o in a]), np.concatenate([o.pcm for o in b]))
    assert [o.text for o in a] == [o.text for o in b]
    assert [None if o.tokens is None else o.tokens.tolist() for o in a] == \
        [None if o.tokens is None else o.tokens.tolist() for o in b]


def test_every_toggle_and_switch_gives_the_same_conversation(model):
    plain, _ = _run(model, RuntimeOptions(seed=0, **PLAIN))
    assert any(o.text for o in plain) and np.count_nonzero(np.concatenate([o.pcm for o in plain]))
    for replay in (False, True):
        for demand in (False, True):
            options = RuntimeOptions(seed=0, graph_replay=replay, demand_sized_state=demand)
            for prepare in (False, True):
                outputs, captured = _run(model, options, prepare=prepare)
                _same(plain, outputs)
                # prepare() captures even with replay off, so that turning it on takes effect at once
                assert captured == (set(second_family.STAGES) if replay or prepare else set())
            flipped = options.replace(graph_replay=not replay, demand_sized_state=not demand)
            _same(plain, _run(model, options, change=flipped)[0])
