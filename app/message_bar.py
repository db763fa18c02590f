"""A dismissible strip at the top of the window for hints and problems, so messages are
seen without blocking the conversation behind a modal dialog."""
from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

STYLES = {
    "info": "background:#e6f0fb; color:#123; border:1px solid #9bbde6; border-radius:4px;",
    "error": "background:#fbe9e9; color:#400; border:1px solid #e39b9b; border-radius:4px;",
}


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
        self.hide()

    def show_message(self, text: str, kind: str = "error") -> None:
        self.setStyleSheet(f"MessageBar {{{STYLES[kind]}}} QLabel {{border:none;}}")
        self.label.setText(text)
        self.show()

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def _dismiss(self) -> None:
        self.hide()
        self.dismissed.emit()
