"""A prepared session with the demo model's DiffuPlex predictor: prepare() runs the wake shapes
of every K up to the predictor's block and the AR frames that catch up played ones (on the
CPU eagerly, since graphs need CUDA), and the conversation after it is an unprepared one's bit
for bit; loading a predictor or changing options after prepare() still gives a fresh
session's output, and switching policy or K mid-conversation meets no new shape. On CUDA, the
first frames after prepare() neither run a stage for the first time nor capture a graph, and
a change that needs new graphs mid-conversation records them between frames, outside the
conversation's own work, taking effect when they are ready."""
import numpy as np
import pytest
import torch

from engine.families.moshi.diffuplex.wake import planned_key, wake_keys
from engine.families.moshi.frame import FRAME_KEYS, PLAY_KEY
from engine.files.audio import read_audio, split_frames
from engine.files.paths import SPEECH_SAMPLE
from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.runtime.stages import StageRunner
from engine.session import DuplexSession
from engine.state.full import FullStore
from tests.session_checks import assert_identical, run

FRAMES = 40
PERSONA = Persona("DEMO", "Be brief.")
K = 4  # the demo predictor's block
POLICIES = [("speak", "off"), ("speak", "semantic"), ("listen", "semantic"), ("ar", "semantic")]


@pytest.fixture(scope="module")
def model():
    return load_model("demo")


@pytest.fixture(scope="module")
def audio():
    return split_frames(read_audio(SPEECH_SAMPLE))[:FRAMES]


def _options(policy: str, verify: str = "semantic", **changes) -> RuntimeOptions:
    # tau 0: SPEAK without verification plays every prediction, so catch-up wakes occur.
    return RuntimeOptions(seed=5, policy=policy, tau=0.0, verify=verify, **changes)


def _shape_keys(k: int) -> list:
    """What a predicting conversation with block k runs besides the plain frame."""
    return [PLAY_KEY, *(key for n in range(k + 1) for key in wake_keys(n, k)), *map(planned_key, range(k))]


@pytest.fixture(scope="module")
def fresh(model, audio):
    """Options -> an unprepared session's output with the predictor loaded (each run once)."""
    runs = {}

    def output(options):
        if options not in runs:
            runs[options] = run(DuplexSession(model, options, PERSONA, predictor=model.predictor_file), audio)
        return runs[options]
    return output


@pytest.mark.parametrize("policy,verify", POLICIES)
def test_a_prepared_diffuplex_session_gives_what_a_fresh_one_gives(model, audio, fresh, policy, verify):
    options = _options(policy, verify)
    session = DuplexSession(model, options, PERSONA, predictor=model.predictor_file)
    session.prepare()
    # Every wake shape ran (prepared, whatever the policy: the app picks it after loading).
    assert session.runner.prepared([*FRAME_KEYS, *_shape_keys(K)])
    out = run(session, audio)
    expected = fresh(options)
    assert_identical(out, expected)
    assert [f.report for f in out] == [f.report for f in expected]
    if verify == "off":
        assert any(f.report is not None and not f.report.woke for f in out)  # predictions played


def _every_shape() -> list:
    return [*(key for k in range(1, K + 1) for key in _shape_keys(k)),
            *(key for n in range(1, K + 1) for k in range(n) for key in wake_keys(n, k))]


def test_every_k_and_every_switch_of_k_is_prepared(model):
    session = DuplexSession(model, _options("speak", block=2), PERSONA, predictor=model.predictor_file)
    session.prepare()
    assert session.runner.prepared(_every_shape())


SWITCHES = {4: _options("speak", "off", block=2), 12: _options("ar"), 16: _options("speak", "off"),
            24: _options("listen", block=3), 30: _options("speak", "off", block=1), 34: _options("ar")}
"""Policy and K changed mid-conversation, with frames played before each switch to AR."""


def test_switching_policy_or_k_mid_conversation_meets_no_new_shape(model, audio):
    session = DuplexSession(model, _options("ar"), PERSONA, predictor=model.predictor_file)
    session.prepare()
    ran = set(session.runner._ran)
    out = run(session, audio, SWITCHES)
    assert any(f.report is not None and not f.report.woke for f in out)
    assert set(session.runner._ran) == ran, set(session.runner._ran) - ran


def test_a_predictor_loaded_after_prepare_gives_a_fresh_sessions_output(model, audio, fresh):
    session = DuplexSession(model, _options("ar"), PERSONA)
    session.prepare()
    session.load_predictor(model.predictor_file)
    session.set_options(_options("speak", "off"))
    session.reset()  # a predictor is used from the next reset
    assert_identical(run(session, audio), fresh(_options("speak", "off")))


def test_options_changed_after_prepare_give_a_fresh_sessions_output(model, audio, fresh):
    session = DuplexSession(model, _options("speak", "off"), PERSONA, predictor=model.predictor_file)
    session.prepare()
    changed = _options("speak", "off", block=3, text_temperature=0.9, audio_top_k=40)
    session.set_options(changed)
    session.reset()
    assert_identical(run(session, audio), fresh(changed))


def test_a_predictor_unloaded_after_prepare_gives_plain_ar(model, audio):
    session = DuplexSession(model, _options("ar"), PERSONA, predictor=model.predictor_file)
    session.prepare()
    session.load_predictor(None)
    session.reset()
    assert_identical(run(session, audio), run(DuplexSession(model, _options("ar"), PERSONA), audio))


def test_a_step_that_never_runs_a_key_stops_with_an_error():
    runner = StageRunner(FullStore([], "cpu"), "cpu")
    with pytest.raises(RuntimeError, match="3 steps left \\['never'\\] unprepared"):
        runner.prepare_through(lambda: None, ["never"], 3)


@pytest.mark.gpu
@pytest.mark.parametrize("policy,verify", POLICIES)
def test_after_prepare_the_first_frames_only_replay(audio, policy, verify):
    """The first DiffuPlex wakes replay: no stage runs eagerly and no graph is captured in the
    first frames of a prepared conversation (the prompts run before them, in reset())."""
    model = load_model("demo", device="cuda")
    options = _options(policy, verify)
    expected = run(DuplexSession(model, options, PERSONA, predictor=model.predictor_file), audio)
    session = DuplexSession(model, options, PERSONA, predictor=model.predictor_file)
    session.prepare()
    runner, eager, captured = session.runner, [], []
    run_stage, capture = runner.run, runner.graphs.capture

    def counted_run(stage, replay=True):
        if not (replay and runner.may_replay((stage.key,))):
            eager.append(stage.key)
        return run_stage(stage, replay)

    runner.run = counted_run
    runner.graphs.capture = lambda key, work, into=None: (captured.append(key), capture(key, work, into))[1]
    out = run(session, audio)
    assert eager == [] and captured == [], (eager, captured)
    assert_identical(out, expected)
    session.close()
    torch.cuda.synchronize()


MID_CHANGES = {6: _options("speak", "off", text_temperature=0.9, audio_top_k=40),
               46: _options("speak", "off", text_temperature=0.9, audio_top_k=40, demand_sized_state=False),
               86: _options("ar", greedy=True, demand_sized_state=False),
               126: _options("listen", block=2, greedy=True, demand_sized_state=False),
               130: _options("listen", block=2, graph_replay=False, audio_top_k=7), 136: _options("speak", "off"),
               196: _options("ar", text_top_k=10), 197: _options("speak", "off", block=3, text_top_k=5)}
"""Mid-conversation changes that need new graphs (sampling, the state's placement, replay back
on after sampling changed without it) mixed with policy and K, each given time to take effect
but the last two (a newer change replaces one being prepared)."""


@pytest.mark.gpu
def test_changes_mid_conversation_are_prepared_between_frames(audio):
    """After prepare(), no frame runs a stage for the first time or captures a graph, whatever
    the changes: graphs a change needs are recorded between frames (a regeneration) while the
    conversation goes on under the options in force, which change at the frame each change
    reports as applied (at once when no graph is needed); the output is then an eager
    session's given each change at that frame."""
    model = load_model("demo", device="cuda")
    audio = np.tile(split_frames(read_audio(SPEECH_SAMPLE)), (2, 1))[:240]
    session = DuplexSession(model, _options("ar"), PERSONA, predictor=model.predictor_file)
    session.prepare()
    runner, live = session.runner, []
    run_stage = runner.run

    def counted_run(stage, replay=True):
        if runner.replay and not (replay and runner.may_replay((stage.key,)) and stage.key in runner.graphs.graphs):
            live.append(stage.key)  # run eagerly or captured inside a frame, with replay on
        return run_stage(stage, replay)

    runner.run = counted_run
    out = run(session, audio, MID_CHANGES)
    applied = [i for i, f in enumerate(out) if f.applied]
    changes = [(i, options) for i, options in MID_CHANGES.items() if i != 196]  # 197 replaced it
    assert len(applied) == len(changes), applied
    assert all(at >= i for at, (i, _) in zip(applied, changes)) and any(f.preparing is not None for f in out)
    assert live == []
    print("frames until each change took effect:", [at - i for at, (i, _) in zip(applied, changes)])
    eager_changes = {at: options.replace(graph_replay=False, demand_sized_state=False)
                     for at, (_, options) in zip(applied, changes)}
    expected = run(DuplexSession(model, _options("ar", graph_replay=False, demand_sized_state=False), PERSONA,
                                 predictor=model.predictor_file), audio, eager_changes)
    assert_identical(out, expected)
    assert [f.report for f in out] == [f.report for f in expected]
    session.close()
    torch.cuda.synchronize()
