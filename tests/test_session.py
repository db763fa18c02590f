"""DuplexSession on the bundled demo model (PersonaPlex-shaped, untrained): resets, options,
prompts, outputs and timings."""
import logging

import numpy as np
import pytest

from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.runtime.timing import SpeakMeter
from engine.session import DuplexSession, FrameOutput
from tests.mimi_reference import varied_audio

FRAMES = 14
PERSONA = Persona("DEMO", "You enjoy a good conversation.")


@pytest.fixture(scope="module")
def model():
    return load_model("demo")


@pytest.fixture(scope="module")
def audio():
    return varied_audio(FRAMES, seed=4).reshape(FRAMES, -1)


def run(session, audio):
    return [session.step(frame) for frame in audio]


def same(a: list[FrameOutput], b: list[FrameOutput]) -> bool:
    return all(x.text == y.text and np.array_equal(x.tokens, y.tokens) and np.array_equal(x.pcm, y.pcm)
               for x, y in zip(a, b, strict=True))


def test_reset_matches_a_fresh_session(model, audio):
    session = DuplexSession(model, RuntimeOptions(seed=5), PERSONA)
    first = run(session, audio)
    session.reset()
    assert same(run(session, audio), first)
    assert same(run(DuplexSession(model, RuntimeOptions(seed=5), PERSONA), audio), first)
    other_seed = DuplexSession(model, RuntimeOptions(seed=6), PERSONA)
    assert not same(run(other_seed, audio), first)


def test_frame_outputs(model, audio):
    session = DuplexSession(model, RuntimeOptions(seed=1), PERSONA)
    out = run(session, audio)
    for frame in out:  # the prompts used up the start-up frames
        assert frame.pcm.dtype == np.float32 and frame.pcm.shape == (model.frame_size,)
        assert frame.tokens.dtype == np.int64 and frame.tokens.shape == (17,)
        assert frame.text == model.text_piece(int(frame.tokens[0]))
        assert set(frame.timings) == {"encode", "backbone", "depformer", "decode", "total"}
        assert all(v >= 0 for v in frame.timings.values())
        assert frame.timings["total"] >= sum(frame.timings[s] for s in ("encode", "backbone", "depformer"))
    assert np.sqrt(np.mean(np.concatenate([f.pcm for f in out]) ** 2)) > 1e-3
    assert len(session.speak_times) == 1  # 14 frames = 1.12 s of output


def test_startup_frames_are_silent_and_tokenless(model, audio):
    session = DuplexSession(model, RuntimeOptions(), Persona(None, ""))
    session.conversation.frame.reset()  # no prompts at all: the frame's own start-up shows
    out = run(session, audio[:3])
    assert [f.tokens is None for f in out] == [True, True, False]
    assert not out[0].pcm.any() and out[0].text == "" and out[0].timings["decode"] == 0.0


def test_prompts_change_the_conversation(model, audio):
    base = run(DuplexSession(model, RuntimeOptions(seed=2), PERSONA), audio)
    for persona in (Persona(None, PERSONA.role), Persona("DEMO", "Talk about the sea.")):
        assert not same(run(DuplexSession(model, RuntimeOptions(seed=2), persona), audio), base)


def test_set_options_applies_from_the_next_frame(model, audio):
    a = DuplexSession(model, RuntimeOptions(seed=3), PERSONA)
    b = DuplexSession(model, RuntimeOptions(seed=3), PERSONA)
    out_a = run(a, audio[:5])
    b_head = run(b, audio[:5])
    b.set_options(RuntimeOptions(seed=3, greedy=True))
    assert same(b_head, out_a)
    assert not same(run(a, audio[5:]), run(b, audio[5:]))


def test_toggles_that_do_not_apply_on_cpu_are_accepted_and_reported(model, caplog):
    session = DuplexSession(model, RuntimeOptions(), Persona(None, ""))
    caps = session.capabilities()
    assert caps["policy.ar"] is None
    assert "CUDA" in caps["graph_replay"] and "CUDA" in caps["demand_sized_state"]
    with caplog.at_level(logging.INFO):
        session.set_options(RuntimeOptions(graph_replay=True, demand_sized_state=True))
    assert "graph_replay" in caplog.text and "demand_sized_state" in caplog.text
    with pytest.raises(ValueError, match="listen"):
        session.set_options(RuntimeOptions(policy="listen"))


@pytest.mark.parametrize("changes", [
    {"policy": "diffuse"}, {"text_temperature": -0.1}, {"audio_temperature": float("nan")},
    {"text_top_k": 2.5}, {"audio_top_k": -1}, {"greedy": 1}, {"seed": -3}, {"graph_replay": "yes"},
])
def test_bad_options_raise(changes):
    with pytest.raises(ValueError):
        RuntimeOptions(**changes)


def test_bad_frames_and_personas_raise(model):
    session = DuplexSession(model, RuntimeOptions(), Persona(None, ""))
    with pytest.raises(ValueError, match="1920"):
        session.step(np.zeros(1000, np.float32))
    from engine.errors import CheckpointError
    with pytest.raises(CheckpointError, match="NOPE"):
        session.reset(Persona("NOPE", ""))


def test_text_pieces(model):
    sp = model.tokenizer
    word = next(i for i in range(4, sp.GetPieceSize()) if sp.id_to_piece(i).startswith("\u2581"))
    assert model.text_piece(word) == " " + sp.id_to_piece(word)[1:]
    assert model.text_piece(0) == model.text_piece(3) == ""


def test_speak_meter_splits_frames_at_second_boundaries():
    meter = SpeakMeter(frame_size=1920, sample_rate=24000)
    completed = [meter.add(0.01 if i != 12 else 0.1) for i in range(25)]  # 2 s; frame 12 straddles
    assert meter.seconds == pytest.approx([12 * 0.01 + 0.05, 0.05 + 12 * 0.01])
    assert [i for i, done in enumerate(completed) if done] == [12, 24]


def test_each_frame_carries_what_the_panel_shows(model, audio):
    session = DuplexSession(model, RuntimeOptions(seed=5), PERSONA)
    out = run(session, audio)
    assert [s for f in out for s in f.speak_s] == session.speak_times
    assert out[-1].state_bytes == session.state_bytes() > 0
    assert all(f.gpu_memory_bytes is None for f in out)  # on the CPU


def test_the_fast_path_is_the_default():
    options = RuntimeOptions()
    assert options.graph_replay and options.demand_sized_state


def test_prompt_replay_can_be_cancelled_and_started_again(model, audio):
    session = DuplexSession(model, RuntimeOptions(seed=5), PERSONA)
    checks = []

    def cancel_after_three_frames() -> bool:
        checks.append(1)
        return len(checks) > 3

    assert session.reset(cancelled=cancel_after_three_frames) is False
    assert len(checks) == 4  # stopped at the fourth check, not after the whole prompt
    assert session.reset() is True
    fresh = DuplexSession(model, RuntimeOptions(seed=5), PERSONA)
    assert same(run(session, audio), run(fresh, audio))
