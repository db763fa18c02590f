"""The window speaks plainly: none of app.window.plain_words' technical terms in any visible text
(labels, buttons, group titles, every combo box item, the chart's legend and painted titles,
message bars) before and during a conversation, with the Engine details folded and open; each
term is in a tooltip instead."""
import re
from pathlib import Path

import pytest
from PyQt6.QtCore import QSettings, Qt
from PyQt6.QtWidgets import QAbstractButton, QComboBox, QGroupBox, QLabel, QLineEdit, QPlainTextEdit, QWidget

from app.app_settings import AppSettings
from app.audio.file_feed import FileFeed
from app.window.cadence_chart import CadenceChart
from app.window.main_window import MainWindow
from app.window.message_bar import MessageBar
from app.window.plain_words import TERMS, pattern, terms_in
from tests.app_helpers import keep_torch_threads, load_demo  # noqa: F401

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_model(qapp):
    return load_demo()


def _visible_texts(window: QWidget) -> list[tuple[str, str]]:
    """(where, text) for every text a person can read in the window now."""
    found = [("window title", window.windowTitle())]
    for widget in window.findChildren(QWidget):
        if not widget.isVisibleTo(window):
            continue
        where = type(widget).__name__
        if isinstance(widget, QLabel):
            found.append((where, re.sub("<[^>]+>", "", widget.text()).replace("&nbsp;", " ")))
        elif isinstance(widget, QAbstractButton):
            found.append((where, widget.text()))
        elif isinstance(widget, QGroupBox):
            found.append((where, widget.title()))
        elif isinstance(widget, QComboBox):
            found += [(where, widget.itemText(i)) for i in range(widget.count())]
        elif isinstance(widget, (QLineEdit, QPlainTextEdit)):
            found.append((where, widget.placeholderText()))
        if isinstance(widget, CadenceChart):  # its titles and limits are painted, not widgets
            found += [(where, words) for words in getattr(widget, "painted_words", tuple)()]
    return [(where, text) for where, text in found if text]


def _tooltips(window: QWidget) -> str:
    tips = [w.toolTip() for w in window.findChildren(QWidget)]
    for combo in window.findChildren(QComboBox):
        tips += [combo.itemData(i, Qt.ItemDataRole.ToolTipRole) or "" for i in range(combo.count())]
    return "\n".join(tips)


def test_the_table_finds_its_terms():
    assert terms_in("Keeping up: 3.4× headroom") == ["headroom"]
    assert terms_in("p99 33 ms · overruns (> 80 ms) 0 · backbone/depformer · τ · Block K") == [
        "p99", "overrun", "backbone", "depformer", "τ", "block K"]
    assert terms_in("● Model speaking · the model speaks · learning the room") == []  # speaking is not SPEAK
    assert pattern("frame").search("80 ms frames") and not pattern("AR").search("AREA or ar")


def test_no_technical_term_is_shown_and_each_is_in_a_tooltip(qtbot, tmp_path, demo_model):
    settings_file = tmp_path / "settings.ini"
    settings_file.write_text(f"[recording]\nfolder={tmp_path / 'recordings'}\n[runtime.v2]\ntau=7\nblock=0\n")
    window = MainWindow(AppSettings(QSettings(str(settings_file), QSettings.Format.IniFormat)), device="cpu")
    qtbot.addWidget(window)
    window.show()
    window.model_picker.select("demo")
    window.models.set_model(demo_model)
    window.model_picker.voice.setCurrentText("No voice prompt")
    window.model_picker.role.setText("Hi.")
    window.conversation_view.save(str(tmp_path / "missing" / "talk.txt"))  # a real message in the bar
    bars = window.findChildren(MessageBar)  # the settings (tau and block above), hint and message bars
    assert bars and all(bar.isVisible() for bar in bars)
    shown: list[tuple[str, str, str]] = []

    def read(stage: str) -> None:
        for engine_open in (False, True):
            window.panel.engine_pane.set_expanded(engine_open)
            qtbot.wait(10)
            shown.extend((stage, where, text) for where, text in _visible_texts(window))
        assert window.panel.speak_label.isVisible()

    read("before")
    window.conversation.start(FileFeed(REPO / "assets" / "speech_sample.wav"))
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 30 and len(window.panel.stats.seconds) >= 1,
                    timeout=60_000)
    window.message_bar.show_message("Cannot write the recording: disk full", "error")
    read("during")
    tooltips = _tooltips(window)
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    technical = [(stage, where, text, terms_in(text)) for stage, where, text in shown if terms_in(text)]
    assert technical == []
    # What was read held the figures (the walk read the panel during the conversation).
    assert any("Keeping up" in text or "Falling behind" in text for _, _, text in shown)
    assert any(text.startswith("Each 80 ms step took") for _, _, text in shown)
    assert [term for term in TERMS if not pattern(term).search(tooltips)] == []
