"""The DuplexCadence invariant on CUDA: the demo model gives bit-identical tokens, text and
PCM with graph replay and demand-sized state on or off, switched at any frame; replay
really runs captured graphs, and demand-sized state never moves."""
import itertools
import json

import numpy as np
import pytest
import torch

from engine.families.moshi.frame import FRAME_KEYS, is_prompt_key
from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.mimi_reference import varied_audio
from tests.session_checks import PLAIN, assert_identical, run

pytestmark = pytest.mark.gpu
FRAMES = 60
PERSONA = Persona("DEMO", "Be brief.")


@pytest.fixture(scope="module", params=[(torch.float32, "bf16"), (torch.bfloat16, "bf16"), (torch.bfloat16, "int8"),
                                        (torch.bfloat16, "int4")], ids=["fp32", "bf16", "bf16-int8", "bf16-int4"])
def model(request):
    dtype, weights = request.param
    return load_model("demo", device="cuda", dtype=dtype, weights=weights)


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES, seed=5).reshape(FRAMES, -1)


@pytest.fixture(scope="module")
def baseline(model, audio):
    return run(DuplexSession(model, RuntimeOptions(seed=9, **PLAIN), PERSONA), audio)


@pytest.mark.parametrize("graph_replay,demand", list(itertools.product([False, True], repeat=2))[1:])
def test_toggle_combinations_bit_identical(model, audio, baseline, graph_replay, demand, record):
    session = DuplexSession(model, RuntimeOptions(seed=9, graph_replay=graph_replay, demand_sized_state=demand),
                            PERSONA)
    kv = session.store["lm.transformer.kv"].data_ptr()
    assert_identical(run(session, audio), baseline)
    assert session.store["lm.transformer.kv"].data_ptr() == kv, "state moved"
    captured = session.runner.captured
    assert len({key for key in captured if not is_prompt_key(key)}) == (4 if graph_replay else 0)
    assert any(map(is_prompt_key, captured)) == graph_replay  # the persona's prompts replayed too
    record("state_bytes", session.state_bytes())
    session.close()


def test_overlapped_launches_change_no_bit(model, audio, monkeypatch):
    """Our kernels launched overlapped (programmatic dependent launch, where the GPU has it) and
    graph-replayed give the bits of an eager session whose kernels launch plainly."""
    from engine.kernels import overlap

    monkeypatch.setattr(overlap, "ENABLED", False)
    assert "launch_pdl" not in overlap.launch(torch.device("cuda"))
    plain = run(DuplexSession(model, RuntimeOptions(seed=9, **PLAIN), PERSONA), audio)
    monkeypatch.setattr(overlap, "ENABLED", True)
    hopper = torch.cuda.get_device_capability() >= (9, 0)
    assert overlap.launch(torch.device("cuda")).get("launch_pdl", False) == hopper
    session = DuplexSession(model, RuntimeOptions(seed=9), PERSONA)
    assert_identical(run(session, audio), plain)
    session.close()


def test_switching_mid_conversation_bit_identical(model, audio, baseline):
    on = RuntimeOptions(seed=9)
    graphs_only = on.replace(demand_sized_state=False)
    off = RuntimeOptions(seed=9, **PLAIN)
    session = DuplexSession(model, off, PERSONA)
    assert_identical(run(session, audio, {6: on, 20: graphs_only, 31: on, 40: off, 41: on}), baseline)


def test_sampling_changes_take_effect_once_their_graphs_are_recorded(model, audio):
    """New sampling needs new graphs: they are recorded after the frames that follow the change
    (the old ones replaying meanwhile) and the change takes effect at the frame that reports it;
    an eager session given the change at that frame gives the same output."""
    session = DuplexSession(model, RuntimeOptions(seed=1, demand_sized_state=False), PERSONA)
    eager = DuplexSession(model, RuntimeOptions(seed=1, **PLAIN), PERSONA)
    greedy = RuntimeOptions(seed=1, greedy=True, demand_sized_state=False)
    a = run(session, audio, {30: greedy})
    at = [i for i, f in enumerate(a) if f.applied]
    assert len(at) == 1 and at[0] > 30 and a[at[0]].applied == ("greedy",)
    assert a[30].preparing.fields == ("greedy",) and a[at[0] - 1].preparing[1:] == (4, 4)
    b = run(eager, audio, {at[0]: greedy.replace(graph_replay=False)})
    assert_identical(a, b)


def test_codec_replay_and_demand_sized_state_bit_identical(audio):
    from engine.families.moshi.codec_session import CodecSession
    from engine.families.moshi.mimi import load_mimi
    from engine.files.paths import DEMO_MODEL_DIR

    mimi = load_mimi(DEMO_MODEL_DIR, device="cuda")
    plain, fast = CodecSession(mimi, RuntimeOptions(**PLAIN)), CodecSession(mimi)
    for frame in audio:
        np.testing.assert_array_equal(fast.roundtrip(frame), plain.roundtrip(frame))
    assert fast.runner.captured == {"encode", "codec_decode"}
    plain.close()
    fast.close()


def test_diffuplex_on_cuda(model, audio, baseline):
    """With the demo's predictor loaded (state sized for its wakes, on demand-sized state at
    stable addresses), AR stays bit-identical to the plain session, graphs and all; SPEAK with
    every prediction accepted plays predicted frames and keeps the state where it was."""
    from engine.families.moshi.model import PREDICTOR_NAME
    from engine.files.paths import DEMO_MODEL_DIR

    predictor = DEMO_MODEL_DIR / PREDICTOR_NAME
    session = DuplexSession(model, RuntimeOptions(seed=9), PERSONA, predictor=predictor)
    assert_identical(run(session, audio), baseline)
    kv = session.store["lm.transformer.kv"].data_ptr()
    session.set_options(RuntimeOptions(seed=9, policy="speak", tau=0.0, verify="off"))
    out = run(session, audio)
    played = sum(not f.report.woke for f in out if f.report is not None)
    assert played > len(audio) // 2
    assert session.store["lm.transformer.kv"].data_ptr() == kv
    session.close()


@pytest.mark.parametrize("policy,verify", [("listen", "semantic"), ("speak", "semantic"), ("speak", "off")])
def test_diffuplex_toggles_bit_identical(model, audio, policy, verify):
    """LISTEN and SPEAK (with predictions checked against the user's real codes, or not) give
    the same tokens, PCM and wake decisions with every toggle combination; with replay, the
    wakes and the planned frames run as captured graphs (a shape is captured when it comes
    again: SPEAK without verification plays every prediction, so its catch-up wakes recur).
    The loop copies a wake's tokens before its decode graph replays: without that copy the
    decode graph, captured earlier, overwrites them (shared memory pool)."""
    from engine.families.moshi.model import PREDICTOR_NAME
    from engine.files.paths import DEMO_MODEL_DIR

    def conversation(**toggles):
        options = RuntimeOptions(seed=9, policy=policy, tau=0.0, verify=verify, **toggles)
        session = DuplexSession(model, options, PERSONA, predictor=DEMO_MODEL_DIR / PREDICTOR_NAME)
        out = run(session, audio)
        return session, out

    plain_session, expected = conversation(**PLAIN)
    plain_session.close()
    for graph_replay, demand in list(itertools.product([False, True], repeat=2))[1:]:
        session, out = conversation(graph_replay=graph_replay, demand_sized_state=demand)
        assert_identical(out, expected)
        assert [f.report for f in out] == [f.report for f in expected]
        if graph_replay:
            captured = session.runner.captured
            wakes = {key[1] for key in captured if key[0] == "backbone" and len(key) == 3}
            assert policy == "listen" or any(key[0] == "planned" for key in captured), captured
            assert wakes and (verify != "off" or max(wakes) > 0), captured  # catch-up wakes replayed
        session.close()
    if verify == "off":  # the demo predicts neither itself silent nor the user's speech
        assert sum(not f.report.woke for f in expected if f.report is not None) > 0


def test_a_prepared_session_starts_captured_and_gives_the_same_output(model, audio, baseline, record):
    """prepare() compiles and captures before the conversation: its first frames replay (no
    compilation or capture inside them) and the output is a fresh session's, bit for bit."""
    session = DuplexSession(model, RuntimeOptions(seed=9), PERSONA)
    session.prepare()
    assert {key for key in session.runner.captured if not is_prompt_key(key)} == set(FRAME_KEYS)
    out = run(session, audio)
    assert_identical(out, baseline)
    record("prepared_slowest_frame_ms", 1000 * max(f.timings["total"] for f in out))
    session.close()


@pytest.fixture(scope="module")
def moshi_model(tmp_path_factory):
    """A small Moshi-variant checkpoint (no prompts: a conversation begins with start-up
    frames, which have no output while the delay lines fill)."""
    from engine.files.paths import LM_NAME, TOKENIZER_NAME
    from tests import mimi_reference
    from tests.lm_reference import make_reference_lm, save_official, small_lm_kwargs, write_tokenizer
    directory = tmp_path_factory.mktemp("moshi_small")
    mimi_cfg = mimi_reference.small_config()
    mimi_reference.save_official(mimi_reference.build_reference(mimi_cfg, num_codebooks=8, seed=2), mimi_cfg,
                                 directory)
    kwargs = small_lm_kwargs(dep_q=8, card=mimi_cfg["quantizer"]["bins"])
    save_official(make_reference_lm(kwargs, seed=4), directory / LM_NAME)
    (directory / "config.json").write_text(json.dumps(kwargs))
    write_tokenizer(directory / TOKENIZER_NAME)
    return load_model(directory, device="cuda")


def test_after_prepare_the_start_up_frames_replay_too(moshi_model, audio):
    """After prepare() the start-up frames replay like the rest (the first second is as fast
    as any), and the output is a fresh session's, bit for bit."""
    expected = run(DuplexSession(moshi_model, RuntimeOptions(seed=9)), audio)
    session = DuplexSession(moshi_model, RuntimeOptions(seed=9))
    session.prepare()
    runner, eager = session.runner, []
    run_stage = runner.run

    def counted_run(stage, replay=True):
        if not (replay and runner.may_replay((stage.key,))):
            eager.append(stage.key)
        return run_stage(stage, replay)

    runner.run = counted_run
    out = run(session, audio)
    assert out[0].tokens is None and eager == [], eager
    assert_identical(out, expected)
    session.close()
