"""The conversation view: the model's words with time marks, speaking or listening, the clock
and the recording state; copying, saving and clearing the words."""
import numpy as np
from PyQt6.QtWidgets import QApplication, QPushButton

from app.conversation.conversation_view import ConversationView
from tests.app_helpers import isolated_settings  # noqa: F401  (chooses the Qt platform)

SILENCE = np.zeros(1920, np.float32)
SPEECH = (0.3 * np.sin(np.arange(1920) / 5)).astype(np.float32)


def _view(qtbot) -> ConversationView:
    view = ConversationView([QPushButton("Start")])
    qtbot.addWidget(view)
    view.show()
    return view


def test_words_arrive_with_a_time_mark_after_each_pause(qtbot):
    view = _view(qtbot)
    view.begin("demo · file", recording=False)
    pieces = {0: " Hello", 1: " there", 2: ",", 40: " How", 41: " are", 42: " you"}  # 40: 3.2 s later
    for index in range(45):
        view.add_frame(index, pieces.get(index, ""), SILENCE)
    assert view.text.toPlainText() == "demo · file\n[0:00] Hello there,\n[0:03] How are you"
    assert view.clock.text() == "0:03"


def test_speaking_listening_and_recording_are_shown(qtbot):
    view = _view(qtbot)
    assert view.indicator.text() == "Not in a conversation" and view.recording.isHidden()
    view.begin("demo", recording=True)
    assert not view.recording.isHidden() and "Recording" in view.recording.text()
    view.add_frame(0, "", SPEECH)
    assert view.indicator.text() == "● Model speaking"
    for index in range(1, 8):  # it stays shown a moment after the model falls silent
        view.add_frame(index, "", SILENCE)
    assert view.indicator.text() == "○ Model listening"
    view.finish()
    assert view.recording.isHidden() and view.indicator.text() == "Not in a conversation"


def test_the_words_are_copied_saved_and_cleared(qtbot, tmp_path):
    view = _view(qtbot)
    view.begin("demo", recording=False)
    view.add_frame(0, " Hi", SILENCE)
    view.copy_button.click()
    assert QApplication.clipboard().text() == "demo\n[0:00] Hi"
    assert view.save(str(tmp_path / "talk.txt"))
    assert (tmp_path / "talk.txt").read_text() == "demo\n[0:00] Hi\n"
    assert not view.save("")  # a cancelled dialog
    failures = []
    view.failed.connect(failures.append)
    assert not view.save(str(tmp_path / "missing" / "talk.txt"))
    assert failures and str(tmp_path / "missing" / "talk.txt") in failures[0]
    view.clear_button.click()
    assert view.text.toPlainText() == ""
    view.add_frame(1, " again", SILENCE)  # the words go on, time-marked
    assert view.text.toPlainText() == "[0:00] again"


def test_a_long_reply_gets_a_time_mark_every_ten_seconds(qtbot):
    view = _view(qtbot)
    view.begin("demo", recording=False)
    for index in range(150):  # 12 s of words without a pause
        view.add_frame(index, " la", SILENCE)
    lines = view.text.toPlainText().splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["[0:00]", "[0:10]"]
