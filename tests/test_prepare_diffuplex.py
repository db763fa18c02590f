"""A prepared session with the demo model's DiffuPlex predictor: prepare() runs the wake shapes
of the predictor's K too (on the CPU eagerly, since graphs need CUDA), and the conversation
after it is an unprepared one's bit for bit; loading a predictor or changing options after
prepare() still gives a fresh session's output. On CUDA, the first frames after prepare()
neither run a stage for the first time nor capture a graph."""
import pytest
import torch

from engine.audio_files import read_audio, split_frames
from engine.duplex_model import load_model
from engine.families.diffuplex.wake import planned_key, wake_keys
from engine.families.moshi.frame import FRAME_KEYS, PLAY_KEY
from engine.options import RuntimeOptions
from engine.paths import SPEECH_SAMPLE
from engine.runtime.stages import StageRunner
from engine.session import DuplexSession, Persona
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
    assert [f.diffuplex for f in out] == [f.diffuplex for f in expected]
    if verify == "off":
        assert any(f.diffuplex is not None and not f.diffuplex.woke for f in out)  # predictions played


def test_the_options_block_decides_the_shapes(model):
    session = DuplexSession(model, _options("speak", block=2), PERSONA, predictor=model.predictor_file)
    session.prepare()
    assert session.runner.prepared(_shape_keys(2)) and not session.runner.prepared(wake_keys(0, K))


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
    first frames of a prepared conversation (the prompts, in reset(), run eagerly as always)."""
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
    runner.graphs.capture = lambda key, work: (captured.append(key), capture(key, work))[1]
    out = run(session, audio)
    assert eager == [] and captured == [], (eager, captured)
    assert_identical(out, expected)
    session.close()
    torch.cuda.synchronize()
