"""The second family (tests/second_family) in the window, as a person would use it: its folder
chosen in the model library, loaded, and a conversation through real PortAudio streams on the
private PulseAudio server. The panel shows its own stages and what its steps report; its
one-second steps (16 kHz in, 24 kHz out, silent on some, 1.5 s on others) reach the virtual
speaker and the recording as 80 ms periods; nothing under app/ names it."""
import json
import time

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.audio.audio_io import ENGINE_RATE, AudioConfig
from tests import second_family
from tests.app_helpers import isolated_settings, keep_torch_threads  # noqa: F401
from tests.audio_fixture import SINK_RATE, best_window_match, virtual_audio  # noqa: F401  (a fixture)

pytestmark = pytest.mark.audio
SPEECH = "assets/speech_sample.wav"


@pytest.fixture
def window(qtbot, tmp_path, virtual_audio):
    from app.window.main_window import MainWindow
    w = MainWindow(isolated_settings(tmp_path), device="cpu",
                   audio_config=AudioConfig(start_timeout_s=2.0, stall_timeout_s=0.5))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()


@pytest.mark.parametrize("step_delay_s", [0, 0.6])
def test_a_conversation_with_a_one_second_family(qtbot, window, virtual_audio, tmp_path, step_delay_s):
    """Also with each step taking 0.6 s, as a big model's second does on a GPU: the microphone's
    audio waits while a step runs (none of it dropped) and the speech still plays in one piece."""
    folder = second_family.write(tmp_path / "second-model", step_delay_s=step_delay_s)
    window.model_picker.folder_chosen.emit(str(folder))  # what the Folder… dialog sends
    assert str(folder) in window.model_picker.combo.currentText()  # listed and chosen
    with qtbot.waitSignal(window.models.signals.loaded, timeout=60_000):
        window.models.load()
    assert window.models.loaded.session.model.family == second_family.FAMILY
    speaker = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    window.device_picker.barge_in.setChecked(False)  # the person's speech goes on over the model's: no interrupt
    reports = []
    window.conversation.signals.frame.connect(reports.append)
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()
    player = virtual_audio.play_into_microphone(SPEECH)
    # Five steps (a step is 12.5 periods): the third spoke, for 1.5 s, played whole by the 75th period.
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 75, timeout=90_000)
    panel = window.panel
    assert "hearing the second" in panel.stage_label.text() and "saying it" in panel.stage_label.text()
    assert any(line.startswith("Spoke in 1 of ") for line in panel.report_lines())
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    player.terminate()
    speaker.terminate()
    speaker.wait()
    assert window.message_bar.text() == ""
    assert reports[-1].counters.dropped_input_s == 0 and reports[-1].counters.dropped_output_s == 0
    end = window.conversation.last_end
    audio, rate = sf.read(end.recording, dtype="float32")
    assert rate == ENGINE_RATE and audio.shape == (end.frames * 1920, 2)
    model = audio[:, 1]  # what the speaker played, as the recording keeps it (back from the device's rate)
    spoken = np.flatnonzero(np.abs(model) > 1e-3)
    # One speaking step: 1.5 s of speech in one piece (no period of it lost, split or repeated).
    assert len(spoken) and abs((spoken[-1] - spoken[0] + 1) - 36000) < 200, (spoken[0], spoken[-1])
    assert spoken[-1] < len(model) - 1920, "it ended before the recording did"
    assert any(piece["word"] in second_family.CONFIG["words"]
               for piece in json.loads(end.transcript.read_text())["words"])
    played, _ = sf.read(tmp_path / "speaker.wav", dtype="float32")
    said = soxr.resample(model[spoken[0]:spoken[-1] + 1], ENGINE_RATE, SINK_RATE)
    assert best_window_match(said, played, SINK_RATE) > 0.9


def test_talking_over_it_interrupts_it(qtbot, window, virtual_audio, tmp_path):
    """Barge-in on (the default), headphones: the person's speech goes on while the model speaks at the third
    step, so 200 ms into the model's speech it is interrupted: its family is told, its 1.5 s
    stop short in the recording's model channel (what the speaker played), faded out, and the
    recording notes where. Each step says five words over its 1.5 s: the transcript keeps those
    played before the cut, not the rest."""
    folder = second_family.write(tmp_path / "second-model", words=["one two three four five"])
    window.model_picker.folder_chosen.emit(str(folder))
    with qtbot.waitSignal(window.models.signals.loaded, timeout=60_000):
        window.models.load()
    assert window.device_picker.barge_in.isChecked() and window.device_picker.barge_in.isEnabled()
    # Headphones (echo cancellation off): barge-in works from the model's first word. With it on, it
    # waits until the canceller has learned the room, or the model's own voice could interrupt it.
    window.device_picker.echo_cancellation.setChecked(False)
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()
    player = virtual_audio.play_into_microphone(SPEECH)
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 75, timeout=90_000)
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    player.terminate()
    assert window.models.loaded.session.conversation.interruptions >= 1
    end = window.conversation.last_end
    model = sf.read(end.recording, dtype="float32")[0][:, 1]
    spoken = np.flatnonzero(np.abs(model) > 1e-3)
    assert len(spoken) and spoken[-1] - spoken[0] + 1 < 36000 - 1920, "cut short"
    record = json.loads(end.transcript.read_text())
    assert record["interruptions"] and record["interruptions"][0]["dropped_s"] > 0
    words = [w["word"] for w in record["words"]]
    assert "one" in words and words.count("five") < words.count("one"), words


def test_its_own_voice_through_the_room_never_interrupts_it(qtbot, window, virtual_audio, tmp_path):
    """Loudspeakers (echo cancellation on, the speaker heard by the microphone 60 ms later at about
    -13 dB) and nobody talking: 20 s of the model's speech coming back through the room never
    interrupts it."""
    folder = second_family.write(tmp_path / "second-model")
    window.model_picker.folder_chosen.emit(str(folder))
    with qtbot.waitSignal(window.models.signals.loaded, timeout=60_000):
        window.models.load()
    loop = virtual_audio.loop_speaker_into_microphone(60, "60%")
    try:
        with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
            window.conversation.start()
        qtbot.waitUntil(lambda: window.panel.stats.frames >= 250, timeout=120_000)
        with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
            window.conversation.stop()
    finally:
        virtual_audio.unload(loop)
    conversation = window.models.loaded.session.conversation
    model = sf.read(window.conversation.last_end.recording, dtype="float32")[0][:, 1]
    assert np.count_nonzero(np.abs(model) > 1e-3) > 2 * ENGINE_RATE, "the model spoke"
    assert conversation.interruptions == 0


def test_talking_over_it_is_heard_while_its_next_step_is_computed(qtbot, window, virtual_audio, tmp_path,
                                                                 monkeypatch):
    """Each step held 0.8 s, as a full-size once-a-second model's on a slow card: its speech plays
    while the next step is computed, and the person talking over it is heard then, through the step.
    The speaker is cut at once (not when the step is done, more than half a second later); the
    family is told between steps, and the speech the running step made is never played."""
    folder = second_family.write(tmp_path / "second-model", words=["one two three four five"])
    window.model_picker.folder_chosen.emit(str(folder))
    with qtbot.waitSignal(window.models.signals.loaded, timeout=60_000):
        window.models.load()
    window.device_picker.echo_cancellation.setChecked(False)  # headphones
    conversation = window.models.loaded.session.conversation
    stepping, step = [False], conversation.step

    def held_step(*args, **kwargs):
        stepping[0] = True
        try:
            time.sleep(0.8)
            return step(*args, **kwargs)
        finally:
            stepping[0] = False

    monkeypatch.setattr(conversation, "step", held_step)
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()
    link, asked = window.conversation.worker.link, []
    cut = link.cut_speaker
    monkeypatch.setattr(link, "cut_speaker", lambda: asked.append(stepping[0]) or cut())
    player = virtual_audio.play_into_microphone(SPEECH)
    qtbot.waitUntil(lambda: conversation.interruptions >= 1, timeout=90_000)
    qtbot.wait(2000)  # the frames past the cut reach the recording
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    player.terminate()
    model = sf.read(window.conversation.last_end.recording, dtype="float32")[0][:, 1]
    spoken = np.flatnonzero(np.abs(model) > 1e-3)
    heard = spoken[spoken < spoken[0] + 36000]  # the speaking step's 1.5 s
    print(f"the model heard over the person: {(heard[-1] - heard[0] + 1) / ENGINE_RATE:.3f} s")  # with -s
    assert asked[0], "cut while the next step ran"
    # The hold (three 80 ms periods) and a period's alignment, not the rest of a step; nothing after it.
    assert heard[-1] - heard[0] + 1 < 0.45 * ENGINE_RATE
