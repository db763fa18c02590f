"""A second model family, defined entirely in tests/second_family, runs through everything a
user's choice goes through: the model library, load_model, DuplexSession (its one-second step
fed by 80 ms periods, its 16 kHz input and 24 kHz output converted, its silent and its long
steps) and `offline`, with nothing under engine/ or app/ naming it."""
import numpy as np
import pytest
import soundfile as sf

from app.cli.commands import main
from engine import RuntimeOptions, list_models, load_model, plan_memory
from engine.period import FRAME_SIZE, SAMPLE_RATE
from engine.session import DuplexSession
from tests import second_family
from tests.second_family.checkpoint import CONFIG

SPEECH = CONFIG["speak_rows"] * CONFIG["row"]
"""Samples of one speaking step: 1.5 s at 24 kHz."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return second_family.write(tmp_path_factory.mktemp("models") / "second-model")


def _mic(periods: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.2 * rng.standard_normal(FRAME_SIZE)).astype(np.float32) for _ in range(periods)]


def _run(folder, periods=110, options: RuntimeOptions | None = None, change_at: int | None = None, change=None):
    session = DuplexSession(load_model(folder), options or RuntimeOptions(seed=0))
    outputs = []
    for i, pcm in enumerate(_mic(periods)):
        if i == change_at:
            session.set_options(change)
        outputs.append(session.step(pcm))
    session.close()
    return outputs


def test_a_folder_of_it_is_listed_planned_and_loaded_as_its_family(folder, tmp_path):
    entries = [e for e in list_models(tmp_path / "hf-cache", [str(folder)]) if e.origin == "folder"]
    assert [e.name for e in entries] == [str(folder)]
    model = load_model(entries[0].name)
    assert (model.family, model.input_rate, model.output_rate, model.step_samples) == ("second", 16000, 24000, 16000)
    plan = plan_memory(entries[0].name, None, "cpu")
    assert plan.state_bytes == sum(r.bytes_full() for r in model.regions()) and plan.fits


def test_its_steps_run_as_each_second_of_audio_completes_and_its_speech_plays_whole(folder):
    outputs = _run(folder)
    ran = [i for i, out in enumerate(outputs) if out.steps]
    assert all(out.steps in (0, 1) for out in outputs)
    assert len(ran) == 8 and all(12 <= b - a <= 13 for a, b in zip(ran, ran[1:])), ran  # 12.5 periods a step
    speaking = [i for i in ran if outputs[i].report.speaking]
    assert speaking == ran[2::3], "every third step speaks"
    for i in ran:  # the family's stages, in its order; `speak` only when it spoke
        assert tuple(outputs[i].timings)[:-1] == second_family.STAGES
        assert (outputs[i].timings["speak"] > 0) == outputs[i].report.speaking
        assert (outputs[i].text != "") == outputs[i].report.speaking
    pcm = np.concatenate([out.pcm for out in outputs])
    for i in speaking:  # 1.5 s from the period it was said in, with no gap, then silence
        start = i * FRAME_SIZE
        assert np.count_nonzero(pcm[start:start + SPEECH]) == SPEECH
        assert not pcm[start + SPEECH:start + SPEECH + FRAME_SIZE].any()
    assert not pcm[:speaking[0] * FRAME_SIZE].any(), "listening steps give no audio"


def test_demand_sized_state_and_a_mid_conversation_move_change_nothing(folder):
    full = _run(folder, options=RuntimeOptions(seed=0, demand_sized_state=False))
    demand = _run(folder, options=RuntimeOptions(seed=0, demand_sized_state=True))
    moved = _run(folder, options=RuntimeOptions(seed=0, demand_sized_state=True), change_at=40,
                 change=RuntimeOptions(seed=0, demand_sized_state=False))
    for other in (demand, moved):
        assert np.array_equal(np.concatenate([o.pcm for o in full]), np.concatenate([o.pcm for o in other]))
        assert [o.text for o in full] == [o.text for o in other]
    assert demand[20].state_bytes < full[20].state_bytes, "its ring grows with its own clock"
    assert demand[60].state_bytes > demand[20].state_bytes
    assert moved[40].applied == ("demand_sized_state",) and moved[60].state_bytes == full[60].state_bytes


def test_offline_writes_its_reply_as_long_as_the_input(folder, tmp_path):
    rate = 16000  # a file at the family's rate: the session's audio is 24 kHz either way
    rng = np.random.default_rng(1)
    sf.write(tmp_path / "in.wav", (0.2 * rng.standard_normal(4 * rate)).astype(np.float32), rate, subtype="FLOAT")
    assert main(["offline", "--model", str(folder), "--input", str(tmp_path / "in.wav"), "--output",
                 str(tmp_path / "out.wav"), "--transcript", str(tmp_path / "out.json"), "--device", "cpu"]) in (0, None)
    reply, out_rate = sf.read(tmp_path / "out.wav", dtype="float32")
    assert out_rate == SAMPLE_RATE and len(reply) == 4 * SAMPLE_RATE
    assert np.count_nonzero(reply) > SAMPLE_RATE // 2, "its third step spoke"
    assert "words" in (tmp_path / "out.json").read_text()
