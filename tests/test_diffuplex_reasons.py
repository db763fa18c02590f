"""Why DiffuPlex's planned frames were not played, as the engine reports it per wake: below τ,
the user's prediction missed, or LISTEN saw the model speak (an untrained predictor on the
demo model: it is neither confident nor right about the user)."""

import pytest

from engine import DiffuPlexStats
from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import demo_with

FRAMES = 40
K = 3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # As in test_diffuplex_session: the token the untrained demo emits most stands for padding,
    # so LISTEN finds the model silent some of the time and speaking the rest.
    return demo_with(tmp_path_factory.mktemp("demo_ctx16"), {"context": 16, "existing_text_padding_id": 197})


@pytest.fixture(scope="module")
def adapter(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("adapter") / "untrained.safetensors"
    save_predictor(new_predictor(model.cfg, rank=2, block=K), path)
    return path


def _stats(model, adapter, **options) -> DiffuPlexStats:
    session = DuplexSession(model, RuntimeOptions(seed=4, block=K, **options), Persona("DEMO", "Hi."),
                            predictor=adapter)
    stats = DiffuPlexStats()
    for frame in varied_audio(FRAMES, seed=3).reshape(FRAMES, -1):
        out = session.step(frame)
        stats.add(out.report, out.timings)
    session.close()
    return stats


def test_an_unconfident_prediction_is_refused_below_tau(model, adapter):
    stats, reported, planned = _stats(model, adapter, policy="speak", tau=0.99), [], []
    session = DuplexSession(model, RuntimeOptions(seed=4, block=K, policy="speak", tau=0.99), Persona("DEMO", "Hi."),
                            predictor=adapter)
    for frame in varied_audio(FRAMES, seed=3).reshape(FRAMES, -1):
        reported.append(session.step(frame).report.confidence)
        planned.append(float(session.conversation.diffuplex._text_confidence[0]))  # the new plan's first frame
    session.close()
    # Each wake reports the confidence of the frame it refused: the last plan's, not its own new one.
    checked = [(confidence, planned[i - 1]) for i, confidence in enumerate(reported) if confidence is not None]
    assert checked and all(confidence == previous for confidence, previous in checked)
    assert stats.wakes == stats.frames and stats.played_per_wake == 0
    assert set(stats.refusals) == {"below_tau"} and stats.refusals["below_tau"] > 0
    assert stats.mean_confidence is not None and stats.mean_confidence < 0.99
    assert "confidence was below τ" in stats.summary()


def test_a_wrong_guess_of_the_user_is_refused_by_verification(model, adapter):
    stats = _stats(model, adapter, policy="speak", tau=0.0, verify="semantic")
    assert stats.refusals.get("user_missed", 0) > 0 and "below_tau" not in stats.refusals
    assert sum(stats.refusals.values()) <= stats.wakes  # at most one reason per wake


def test_listen_refuses_while_the_model_speaks(model, adapter):
    stats = _stats(model, adapter, policy="listen", tau=0.0, verify="off")
    assert stats.refusals.get("speech", 0) > 0
    assert "LISTEN saw the model speak" in " ".join(stats.refusal_lines())
