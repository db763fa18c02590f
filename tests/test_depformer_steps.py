"""The depformer runs only the codebooks a frame does not know already: a step whose token came
from outside (teacher-forced) and that no unknown one follows reads into nothing. PersonaPlex's
conversation frames take the user's 8 codebooks from the microphone, so they run the model's 8
steps of 16; its prompts force every stream and run none; a DiffuPlex plan's frames run up to
the user's semantic code (9), which verification reads. A step left out still draws the random
numbers its sampling would draw, so the output is bit for bit what running every step gives."""
import collections

import pytest

from engine.families.moshi.frame import depformer_steps
from engine.families.moshi.lm.moshi_lm import MoshiLM
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import assert_identical, run
from tests.test_diffuplex_session import K, adapter, model  # noqa: F401  (fixtures: the demo, 16-frame context)

FRAMES = 24
PERSONA = Persona("DEMO", "Be brief.")


def test_steps_run_up_to_the_last_codebook_not_known():
    assert depformer_steps([False] * 5, 4) == 4
    assert depformer_steps([False, False, True, True, True], 4) == 1
    assert depformer_steps([True] * 5, 4) == 0
    assert depformer_steps([False, True, False, True, True], 4) == 2  # only a known tail is left out
    assert depformer_steps([False, False, False, True, True, False], 4) == 2  # streams past dep_q: not the depformer's


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES, seed=5).reshape(FRAMES, -1)


@pytest.fixture
def steps_run(monkeypatch):
    """Counts the depformer's steps as they run."""
    counted = collections.Counter()
    step = MoshiLM.depformer_step

    def counting(self, k, *args):
        counted[k] += 1
        return step(self, k, *args)

    monkeypatch.setattr(MoshiLM, "depformer_step", counting)
    return counted


def test_personaplex_runs_the_model_codebooks_only(model, audio, steps_run):
    cfg = model.cfg
    assert cfg.dep_q == 2 * cfg.model_q  # PersonaPlex-shaped
    session = DuplexSession(model, RuntimeOptions(seed=1), PERSONA)
    session.step(audio[0])  # the prompts run before the first frame
    prompts_and_first = sum(steps_run.values())
    steps_run.clear()
    run(session, audio[1:])
    assert prompts_and_first == cfg.model_q  # the prompts force every stream: no step
    assert dict(steps_run) == dict.fromkeys(range(cfg.model_q), FRAMES - 1)


def test_planned_frames_run_up_to_the_users_semantic_code(model, adapter, audio, steps_run):
    """Verification reads the predicted user semantic code; the user's other codebooks trail it
    by a frame, so a played frame has the microphone's (as the AR path outputs them)."""
    cfg = model.cfg
    options = RuntimeOptions(seed=7, policy="speak", block=K, tau=0.0, verify="off")
    session = DuplexSession(model, options, PERSONA, predictor=adapter)
    assert session.conversation.diffuplex.wakes._planned_steps[:K] == [cfg.model_q + 1] * K
    out = run(session, audio)
    played, steps = sum(not f.report.woke for f in out), sum(steps_run.values())
    assert played > FRAMES // 2
    assert steps == (FRAMES - played) * cfg.model_q + played * (cfg.model_q + 1)
    ar = run(DuplexSession(model, RuntimeOptions(seed=7), PERSONA), audio)
    acoustic = slice(2 + cfg.model_q, None)
    for i, (x, y) in enumerate(zip(out, ar)):
        if y.tokens is not None:
            assert (x.tokens[acoustic] == y.tokens[acoustic]).all(), i


def _every_step(monkeypatch):
    """The depformer as it ran before: every step, whatever is known."""
    for module in ("engine.families.moshi.frame", "engine.families.moshi.diffuplex.wake"):
        monkeypatch.setattr(f"{module}.depformer_steps", lambda known, dep_q: dep_q)


@pytest.mark.parametrize("policy, verify", [("ar", "semantic"), ("speak", "off"), ("speak", "semantic")])
def test_leaving_steps_out_changes_nothing(model, adapter, audio, monkeypatch, policy, verify):
    """Sampled, with the persona's prompts; under SPEAK an untrained predictor's frames are
    played (tau 0, no verification) or refused after their depformer (verification)."""
    options = RuntimeOptions(seed=7, policy=policy, block=K, tau=0.0, verify=verify)
    fewer = run(DuplexSession(model, options, PERSONA, predictor=adapter), audio)
    with monkeypatch.context() as patched:
        _every_step(patched)
        every = run(DuplexSession(model, options, PERSONA, predictor=adapter), audio)
    assert_identical(fewer, every)
    if policy == "speak" and verify == "off":
        assert sum(not f.report.woke for f in fewer) > FRAMES // 2  # predicted frames were played


def test_the_bench_compares_every_step_with_fewer_on_the_demo():
    """bench.depformer_steps (its speed figures are the bench's, not asserted here)."""
    from bench.depformer_steps import measure

    result = measure("demo", 16)
    assert result["bit_identical"] and result["every_step"]["prompt_s"] > 0
