"""MiniCPM-o 4.5 in the window, as a person would use it: its folder (the tiny random checkpoint in the
official layout) chosen in the model library, loaded, and a conversation through real PortAudio streams on
the private PulseAudio server: the panel names the family's own stages, its per-second decisions reach the
report, and the recording keeps the conversation. Text only: the tiny folder has no token2wav tail. The
model is bilingual: Chinese in the transcript renders with real glyphs (a CJK font, no empty boxes)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.audio.audio_io import ENGINE_RATE
from tests.app_helpers import isolated_settings, keep_torch_threads  # noqa: F401
from tests.audio_fixture import virtual_audio  # noqa: F401  (a fixture)
from tests.test_app_second_family import window  # noqa: F401  (a fixture: the offscreen window)

pytestmark = pytest.mark.audio
SPEECH = "assets/speech_sample.wav"
TINY = Path(__file__).parent / "golden" / "minicpmo_tiny"


def test_a_conversation_with_minicpmo(qtbot, window, virtual_audio, tmp_path):
    folder = shutil.copytree(TINY, tmp_path / "MiniCPM-o-4_5")
    window.model_picker.folder_chosen.emit(str(folder))
    assert str(folder) in window.model_picker.combo.currentText()
    with qtbot.waitSignal(window.models.signals.loaded, timeout=60_000):
        window.models.load()
    assert window.models.loaded.session.model.family == "minicpmo"
    assert window.device_picker.barge_in.isEnabled()  # once a second: talking over it interrupts it
    load_notice = window.message_bar.text()
    assert "one-second rhythm" in load_notice  # what sets it apart from Moshi, said once
    # A saved persona preset (Settings) sets its system prompt; it has one voice, its tail's.
    window._use_persona("", "You are a patient teacher.")
    assert window.model_picker.persona() == (None, "You are a patient teacher.")
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()
    assert window.models.loaded.session.conversation.persona.role == "You are a patient teacher."
    player = virtual_audio.play_into_microphone(SPEECH)
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 70, timeout=120_000)  # 5.6 s: five units
    panel = window.panel
    assert "hearing the second" in panel.stage_label.text()
    assert any(line.startswith("Spoke in ") and "seconds" in line for line in panel.report_lines())
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    player.terminate()
    assert window.message_bar.text() in ("", load_notice)  # nothing went wrong meanwhile
    end = window.conversation.last_end
    audio, rate = sf.read(end.recording, dtype="float32")
    assert rate == ENGINE_RATE and audio.shape == (end.frames * 1920, 2)


def test_its_voice_is_chosen_in_the_model_box_and_heard(qtbot, window, virtual_audio, tmp_path):
    """A folder with the tail and its voice front end: the Voice box lists the voice made at load,
    first (the default); the conversation speaks with it, aloud, into the recording."""
    from engine.families.minicpmo.voices import VOICES

    _load_with_its_tail(qtbot, window, tmp_path)
    picker, voice = window.model_picker, next(iter(VOICES))
    assert picker.voice.isVisibleTo(window)
    assert [picker.voice.itemText(i) for i in range(picker.voice.count())] == [voice, "No voice prompt"]
    assert picker.persona()[0] == voice
    with qtbot.waitSignal(window.conversation.signals.started, timeout=120_000):
        window.conversation.start()
    conversation = window.models.loaded.session.conversation
    assert conversation.persona.voice == voice and conversation.prompt is conversation.model.voices[voice].prompt
    player = virtual_audio.play_into_microphone(SPEECH)
    # Its words are shown once the speaker plays their unit (a second, its speech at the end): then
    # more units, and time for the speaker to play them.
    qtbot.waitUntil(lambda: "\n[" in window.transcript.toPlainText(), timeout=180_000)
    qtbot.waitUntil(lambda: conversation.unit >= 8, timeout=180_000)
    qtbot.wait(3000)
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=30_000):
        window.conversation.stop()
    player.terminate()
    audio, _ = sf.read(window.conversation.last_end.recording, dtype="float32")
    assert abs(audio[:, 1]).max() > 0.01  # the model's channel: it spoke aloud


def test_chinese_in_the_transcript_has_glyphs(qtbot):
    from PyQt6.QtGui import QTextLayout

    from app.conversation.conversation_view import ConversationView

    view = ConversationView([])
    qtbot.addWidget(view)
    text = "你好，我们今天聊聊天气吧。"
    layout = QTextLayout(text, view.text.font())
    layout.beginLayout()
    layout.createLine()
    layout.endLayout()
    glyphs = [index for run in layout.glyphRuns() for index in run.glyphIndexes()]
    assert len(glyphs) == len(text) and 0 not in glyphs  # glyph 0 is the empty box a missing font draws


def _load_with_its_tail(qtbot, window, tmp_path) -> None:
    """The tiny checkpoint with a tail and its voice front end, chosen and loaded in the window."""
    pytest.importorskip("onnxruntime")
    from tests.test_minicpmo_voices import with_voice

    folder = with_voice(tmp_path / "MiniCPM-o-4_5")
    window.model_picker.folder_chosen.emit(str(folder))
    with qtbot.waitSignal(window.models.signals.loaded, timeout=120_000):
        window.models.load()


def _counted_interrupts(session, monkeypatch) -> list[float]:
    """The session's interrupts, as they happen (each the seconds it dropped): the real call, counted."""
    cuts, interrupt = [], session.interrupt
    monkeypatch.setattr(session, "interrupt", lambda: cuts.append(interrupt()) or cuts[-1])
    return cuts


def test_talking_over_it_interrupts_it(qtbot, window, virtual_audio, tmp_path, monkeypatch):
    """Barge-in with MiniCPM-o itself (the tiny checkpoint with its tail), headphones: the person talks
    all along, so once the speaker has played the model's speech for 200 ms over them it is
    interrupted (its break override set for the next unit), the speaker's queued speech stops within
    1,920 samples of the interrupt in the played stream, and what was queued after that is dropped.
    The recording marks the cut where the person had talked over the speech played. Sample
    positions, not a clock."""
    _load_with_its_tail(qtbot, window, tmp_path)
    window.device_picker.echo_cancellation.setChecked(False)  # headphones: it may interrupt from the first word
    speech, rate = sf.read(SPEECH, dtype="float32")
    talking = tmp_path / "talking.wav"
    sf.write(talking, np.tile(speech, 6), rate)  # a minute of the person talking
    with qtbot.waitSignal(window.conversation.signals.started, timeout=120_000):
        window.conversation.start()
    cuts = _counted_interrupts(window.models.loaded.session, monkeypatch)
    queue = window.conversation.worker.link._speaker_queue
    player = virtual_audio.play_into_microphone(talking)
    qtbot.waitUntil(lambda: len(cuts) > 0, timeout=180_000)
    qtbot.wait(2000)  # the frames past the cut reach the recording
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=30_000):
        window.conversation.stop()
    player.terminate()
    # The played stream: the fade began at the next block the device took and silence followed it.
    device_samples = round(1920 * queue.rate / ENGINE_RATE)
    assert queue.cut_at is not None and queue.cut_at + len(queue._ramp) - queue.cut_asked_at <= device_samples
    assert cuts[0] + queue.cut_dropped / queue.rate > 0, "queued speech was dropped, never played"
    end = window.conversation.last_end
    model = sf.read(end.recording, dtype="float32")[0][:, 1]  # what the speaker played, lined up with the microphone
    at = json.loads(end.transcript.read_text())["interruptions"][0]["sample"]
    assert np.abs(model[at - 2 * 1920:at + 1920]).max() > 1e-3, "the person talked over speech the speaker played"


def test_its_own_voice_through_the_room_never_interrupts_it(qtbot, window, virtual_audio, tmp_path, monkeypatch):
    """Loudspeakers (echo cancellation on, the speaker heard by the microphone 60 ms later at about
    -13 dB) and nobody talking: MiniCPM-o's speech (the tiny checkpoint with its tail) coming back
    through the room never interrupts it."""
    _load_with_its_tail(qtbot, window, tmp_path)
    assert window.device_picker.echo_cancellation.isChecked() and window.device_picker.barge_in.isChecked()
    cuts = _counted_interrupts(window.models.loaded.session, monkeypatch)
    loop = virtual_audio.loop_speaker_into_microphone(60, "60%")
    try:
        with qtbot.waitSignal(window.conversation.signals.started, timeout=120_000):
            window.conversation.start()
        qtbot.waitUntil(lambda: window.panel.stats.frames >= 375, timeout=180_000)  # 30 s
        with qtbot.waitSignal(window.conversation.signals.finished, timeout=30_000):
            window.conversation.stop()
    finally:
        virtual_audio.unload(loop)
    model = sf.read(window.conversation.last_end.recording, dtype="float32")[0][:, 1]
    assert np.count_nonzero(np.abs(model) > 1e-3) > 5 * ENGINE_RATE, "the model spoke, aloud, for seconds"
    assert cuts == []
