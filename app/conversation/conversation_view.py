"""The conversation as a person follows it: the model's words, large, as they arrive, each
utterance marked with the time it began; whether the model is speaking or listening; the
conversation's time and whether it is being recorded. The words can be copied, saved as text
and cleared."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PyQt6.QtCore import pyqtSignal
from PyQt6.QtGui import QFontMetrics, QPalette, QTextCharFormat, QTextCursor
from PyQt6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import FRAME_SECONDS

from ..window.cadence_chart import OVER, UNDER, colour
from .transcript import Words

PAUSE_S = 1.0         # a word after this much silence starts a new, time-marked line
LINE_S = 10.0         # ... and so does one this long after its line's mark (a long reply stays findable)
SPEAKING_DBFS = -40.0  # the model's output above this level is speech, not silence
HOLD_FRAMES = 5       # speaking stays shown this many frames after the last loud one (no flicker)
TEXT_SCALE = 1.5
RECORDING = "Recording"


def time_mark(seconds: float) -> str:
    whole = int(seconds)
    return f"[{whole // 60}:{whole % 60:02d}]"


class ConversationView(QWidget):
    failed = pyqtSignal(str)  # the words could not be saved: why, in one line

    def __init__(self, leading: list[QWidget], parent=None):
        """`leading`: widgets that come first in the top row (the window's Start and Stop)."""
        super().__init__(parent)
        self.indicator = QLabel()
        self.indicator.setToolTip("Whether the model is speaking now, or listening to you.")
        self.clock = QLabel("0:00")
        self.clock.setToolTip("The conversation's time.")
        self.recording = QLabel()
        self.recording.setToolTip("This conversation is being recorded (stereo WAV and its transcript).")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlaceholderText("What the model says appears here, as it says it.")
        font = self.text.font()
        font.setPointSizeF(font.pointSizeF() * TEXT_SCALE)
        self.text.setFont(font)
        self.copy_button = _text_button("Copy")
        self.copy_button.setToolTip("Copy the selected words, or all of them, to the clipboard.")
        self.save_button = _text_button("Save…")
        self.save_button.setToolTip("Save the words as text, with their time marks.")
        self.clear_button = _text_button("Clear")
        self.clear_button.setToolTip("Clear the words shown (a recording's transcript is kept).")
        top = QHBoxLayout()
        for widget in leading:
            top.addWidget(widget)
        top.addSpacing(12)
        for widget in (self.indicator, self.clock, self.recording):
            top.addWidget(widget)
        top.addStretch(1)
        for widget in (self.copy_button, self.save_button, self.clear_button):
            top.addWidget(widget)
        self._reserve_room()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.text, 1)
        self.copy_button.clicked.connect(self.copy)
        self.save_button.clicked.connect(lambda: self.save(QFileDialog.getSaveFileName(
            self, "Save the conversation", "conversation.txt", "Text (*.txt)")[0]))
        self.clear_button.clicked.connect(self.clear)
        self._words = Words()
        self._line_start = 0.0
        self._loud_frame = -HOLD_FRAMES - 1
        # Titles and time marks smaller and muted: the words are what a person reads.
        self._aside = QTextCharFormat()
        self._aside.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        self._aside.setFontPointSize(font.pointSizeF() / TEXT_SCALE)
        self._words_format = QTextCharFormat()
        self._words_format.setFontPointSize(font.pointSizeF())
        self.finish()

    # --- a conversation ---------------------------------------------------------------
    def begin(self, title: str, recording: bool) -> None:
        """A conversation starts (its frames count from 0 again)."""
        self._words = Words()
        self._loud_frame = -HOLD_FRAMES - 1
        self._append(("" if self.text.document().isEmpty() else "\n\n") + title, self._aside)
        self.clock.setText("0:00")
        dot = f'<span style="color:{colour(self, OVER).name()}">●</span>'
        self.recording.setText(f"{dot} {RECORDING}" if recording else "")
        self.recording.setVisible(recording)
        self._show_speaking(False)

    def add_frame(self, index: int, piece: str, pcm: np.ndarray) -> None:
        """Frame `index`'s text piece and the model's audio of it."""
        self.add_words(index, piece)
        if _dbfs(pcm) > SPEAKING_DBFS or piece.strip():
            self._loud_frame = index
        self._show_speaking(index - self._loud_frame <= HOLD_FRAMES)
        seconds = int((index + 1) * FRAME_SECONDS)
        self.clock.setText(f"{seconds // 60}:{seconds % 60:02d}")

    def add_words(self, index: int, piece: str) -> None:
        """Frame `index`'s text piece, once its speech plays (it may come frames after the frame)."""
        before = self._words.words[-1]["end"] if self._words.words else None
        count = len(self._words.words)
        self._words.add(index, piece)
        if len(self._words.words) > count:  # a new word: after a pause it opens a time-marked line
            start = self._words.words[-1]["start"]
            if before is None or start - before >= PAUSE_S or start - self._line_start >= LINE_S:
                self._line_start = start
                self._append(("" if self.text.document().isEmpty() else "\n") + f"{time_mark(start)} ", self._aside)
                piece = piece.lstrip()
        if piece:
            self._append(piece, self._words_format)

    def finish(self) -> None:
        """No conversation (any more): nothing speaks, nothing records."""
        self.indicator.setText("Not in a conversation")
        self.indicator.setStyleSheet("")
        self.recording.hide()

    # --- the words ----------------------------------------------------------------------
    def copy(self) -> None:
        cursor = self.text.textCursor()
        QApplication.clipboard().setText(cursor.selectedText().replace("\u2029", "\n") if cursor.hasSelection()
                                         else self.text.toPlainText())

    def save(self, path: str) -> bool:
        """Writes the words shown to `path` ("" from a cancelled dialog: nothing); a failure
        is emitted (`failed`). True when written."""
        if not path:
            return False
        try:
            Path(path).write_text(self.text.toPlainText().strip() + "\n", encoding="utf-8")
        except OSError as exc:
            self.failed.emit(f"Cannot save the conversation to {path}: {exc.strerror}")
            return False
        return True

    def clear(self) -> None:
        self.text.clear()
        self._line_start = -LINE_S  # the next word opens a time-marked line

    def _append(self, text: str, style: QTextCharFormat) -> None:
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, style)
        self.text.setTextCursor(cursor)
        self.text.ensureCursorVisible()

    def _reserve_room(self) -> None:
        """The top row is as wide in a conversation as out of one: the states' widest text, the
        clock's, and the recording mark's room kept while it is hidden. Were it to widen when a
        conversation starts, the splitter would squeeze the panel beside it."""
        bold = self.indicator.font()
        bold.setBold(True)
        widest = max(QFontMetrics(font).horizontalAdvance(text) for font, text in (
            (self.indicator.font(), "Not in a conversation"), (bold, "● Model speaking"), (bold, "○ Model listening")))
        self.indicator.setMinimumWidth(widest + 2)
        self.clock.setMinimumWidth(self.clock.fontMetrics().horizontalAdvance("00:00") + 2)
        self.recording.setText(f"● {RECORDING}")
        self.recording.setMinimumWidth(self.recording.sizeHint().width())
        policy = self.recording.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.recording.setSizePolicy(policy)

    def _show_speaking(self, speaking: bool) -> None:
        self.indicator.setText("● Model speaking" if speaking else "○ Model listening")
        shade = f" color: {colour(self, UNDER).name()};" if speaking else ""
        self.indicator.setStyleSheet("font-weight: bold;" + shade)


def _text_button(text: str) -> QToolButton:
    """A button as wide as its word: a push button's 80 px minimum, three times over, would
    crowd the top row."""
    button = QToolButton()
    button.setText(text)
    return button


def _dbfs(pcm: np.ndarray) -> float:
    rms = math.sqrt(float(np.dot(pcm, pcm)) / max(len(pcm), 1))
    return 20 * math.log10(max(rms, 1e-6))
