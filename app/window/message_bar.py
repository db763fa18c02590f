"""A dismissible strip at the top of the window for hints and problems, so messages are
seen without blocking the conversation behind a modal dialog."""
from __future__ import annotations

from PyQt6.QtCore import QRectF, pyqtSignal
from PyQt6.QtGui import QPainter, QPen
from PyQt6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from .theme import BarColours, bar_colours

KINDS = ("info", "warning", "error")


class MessageBar(QFrame):
    dismissed = pyqtSignal()

    def __init__(self, button_text: str = "Dismiss", parent=None):
        super().__init__(parent)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.button = QPushButton(button_text)
        self.button.clicked.connect(self._dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self.kind = "error"
        self.hide()

    def show_message(self, text: str, kind: str = "error") -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown message kind {kind!r}; choose one of {', '.join(KINDS)}")
        self.kind = kind
        self.label.setText(text)
        self.show()
        self.update()

    def colours(self) -> BarColours:
        """Derived from the palette at each paint, so a change of theme recolours the bar."""
        return bar_colours(self.palette(), self.kind)

    def paintEvent(self, event) -> None:
        colours = self.colours()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(colours.border, 1))
        painter.setBrush(colours.background)
        painter.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def _dismiss(self) -> None:
        self.hide()
        self.dismissed.emit()
