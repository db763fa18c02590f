"""DiffuPlex in a conversation, on the demo model (PersonaPlex-shaped) with a 16-frame context.

An oracle predictor (tests only) stands in for a trained one: each wake's prediction replaced
by what the AR model actually generates next under greedy decoding, with full confidence. Then
LISTEN and SPEAK must reproduce the AR conversation token for token and sample for sample while
waking the backbone less than once a frame; a scripted divergence must wake it early without
changing what was played."""

import numpy as np
import pytest
import torch

from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import assert_identical, demo_with

FRAMES = 48
K = 4
PERSONA = Persona("DEMO", "Be brief.")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # The untrained demo never emits the padding token, so LISTEN would never find the assistant
    # silent: the token it emits most stands for padding here (prompts use it too, consistently).
    return demo_with(tmp_path_factory.mktemp("demo_ctx16"), {"context": 16, "existing_text_padding_id": 197})


@pytest.fixture(scope="module")
def adapter(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("adapter") / "untrained.safetensors"
    save_predictor(new_predictor(model.cfg, rank=2, block=K), path)
    return path


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES, seed=3).reshape(FRAMES, -1)


def _options(policy: str) -> RuntimeOptions:
    return RuntimeOptions(seed=4, greedy=True, policy=policy, block=K, tau=0.5)


@pytest.fixture(scope="module")
def ar_run(model, audio):
    """The AR conversation, and what each frame generated (the oracle's predictions)."""
    session = DuplexSession(model, _options("ar"), PERSONA)
    out, rows = [], []
    for frame in audio:
        out.append(session.step(frame))
        rows.append(session.conversation.frame.last_generated().clone())
    return out, rows


def _with_oracle(session, rows, corrupt=None):
    """The planned frame at frame i is rows[i] (what the AR model generated there) with
    confidence 1, and so is the text a wake plans; `corrupt` maps a frame to a wrong user
    semantic code in its prediction."""
    original, now = session.conversation.diffuplex.wakes.planned, {"frame": 0}

    def planned(f):
        original(f)  # the depformer still runs (greedy: it draws no random numbers)
        row = rows[now["frame"]].clone()
        if corrupt and now["frame"] in corrupt:
            row[1 + session.model.cfg.model_q] = corrupt[now["frame"]]
        return row, torch.tensor(1.0)

    def planned_text():  # past the conversation's end: the last frame's (never played)
        ahead = [rows[min(j, len(rows) - 1)][0] for j in range(now["frame"] + 1, now["frame"] + 1 + K)]
        return torch.stack(ahead), torch.ones(K)

    wakes = session.conversation.diffuplex.wakes
    wakes.planned, wakes.planned_text = planned, planned_text
    return now


def _run(session, audio, now):
    out = []
    for i, frame in enumerate(audio):
        now["frame"] = i
        out.append(session.step(frame))
    return out


@pytest.mark.parametrize("policy", ["listen", "speak"])
def test_with_an_oracle_the_policies_reproduce_ar_and_wake_less(model, adapter, audio, ar_run, policy):
    expected, rows = ar_run
    session = DuplexSession(model, _options(policy), PERSONA, predictor=adapter)
    out = _run(session, audio, _with_oracle(session, rows))
    assert_identical(out, expected)
    wakes = sum(f.report.woke for f in out)
    played = sum(not f.report.woke for f in out)
    assert wakes + played == FRAMES and played > 0, (wakes, played)
    if policy == "speak":
        assert wakes <= FRAMES // (K + 1) + 1  # every wake's K frames are all played


def test_a_divergence_wakes_early_and_changes_nothing_played(model, adapter, audio, ar_run):
    expected, rows = ar_run
    session = DuplexSession(model, _options("speak"), PERSONA, predictor=adapter)
    wrong = (int(rows[22][1 + model.cfg.model_q]) + 1) % 2048
    out = _run(session, audio, _with_oracle(session, rows, corrupt={22: wrong}))
    assert_identical(out, expected)
    assert out[22].report.woke and out[22].report.discarded > 0  # revised: the rest predicted again
    assert not out[21].report.woke or out[21].report.discarded == 0


def test_switching_policies_with_an_oracle_stays_exact(model, adapter, audio, ar_run):
    """SPEAK, then AR (whatever SPEAK had planned is dropped, what it played caught up), then
    SPEAK again: the AR conversation all along."""
    expected, rows = ar_run
    session = DuplexSession(model, _options("speak"), PERSONA, predictor=adapter)
    now = _with_oracle(session, rows)
    out = []
    for i, frame in enumerate(audio):
        now["frame"] = i
        if i in (10, 20):
            session.set_options(_options("ar" if i == 10 else "speak"))
        out.append(session.step(frame))
    assert_identical(out, expected)
    assert any(not f.report.woke for f in out[21:] if f.report is not None)


def test_ar_through_the_diffuplex_path_is_bit_identical(model, adapter, audio, ar_run):
    expected, _ = ar_run
    session = DuplexSession(model, _options("ar"), PERSONA, predictor=adapter)
    out = [session.step(frame) for frame in audio]
    assert_identical(out, expected)
    # Switching policies mid-conversation with an untrained predictor: whatever it played
    # enters history, and AR afterwards runs on it.
    session.reset()
    for i, frame in enumerate(audio):
        if i == 10:
            session.set_options(_options("speak").replace(tau=0.0))
        if i == 20:
            session.set_options(_options("ar"))
        session.step(frame)
    assert not session.conversation.diffuplex.pending


def test_policies_say_why_they_are_unavailable(model, adapter):
    session = DuplexSession(model, _options("ar"), PERSONA)
    assert "no DiffuPlex predictor" in session.capabilities()["policy.listen"]
    with pytest.raises(ValueError, match="not available"):
        session.set_options(_options("listen"))
    session.load_predictor(adapter)
    assert session.capabilities()["policy.speak"] is None
    with pytest.raises(ValueError, match="tau"):
        RuntimeOptions(tau=1.5)
    with pytest.raises(ValueError, match="block"):
        RuntimeOptions(block=0)
    assert np.isclose(RuntimeOptions().tau, 0.5)
