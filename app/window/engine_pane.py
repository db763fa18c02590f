"""A pane that folds away: the engine's details (stages, the family's report, memory, the audio queue,
the runtime switches) stay one click from the cadence at a glance, out of a newcomer's way."""
from __future__ import annotations

from PyQt6.QtCore import Qt, pyqtSignal
from PyQt6.QtWidgets import QFrame, QToolButton, QVBoxLayout, QWidget


class EnginePane(QWidget):
    toggled = pyqtSignal(bool)  # the user opened (True) or closed it

    def __init__(self, title: str, body: QWidget, parent=None):
        super().__init__(parent)
        self.header = QToolButton()
        self.header.setText(title)
        self.header.setCheckable(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setAutoRaise(True)
        self.header.setToolTip("Show or hide how the engine spends its time, its memory and its switches.")
        self.body = body
        rule = QFrame()
        rule.setFrameShape(QFrame.Shape.HLine)
        rule.setFrameShadow(QFrame.Shadow.Sunken)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(rule)
        layout.addWidget(self.header)
        layout.addWidget(body)
        self.header.toggled.connect(self._show_body)
        self._show_body(False)

    def is_expanded(self) -> bool:
        return self.header.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        self.header.setChecked(expanded)

    def _show_body(self, expanded: bool) -> None:
        self.header.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.body.setVisible(expanded)
        self.toggled.emit(expanded)
