"""Scrolling past a control never changes it: a combo box, spin box or slider takes the mouse
wheel only once it has focus from a click or the keyboard. Qt's default lets the wheel itself
give focus, so scrolling the side panel turned whatever passed under the cursor (a saved,
live setting)."""
from __future__ import annotations

from PyQt6.QtCore import QEvent, QObject, Qt
from PyQt6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QComboBox, QWidget

GUARDED = (QComboBox, QAbstractSpinBox, QAbstractSlider)


class WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget) and not watched.hasFocus():
            event.ignore()  # on to the parent: the scroll area scrolls
            return True
        return False


def guard_wheel(root: QWidget) -> WheelGuard:
    """Guard every such control under `root` (call again after adding controls); keep the
    returned object alive as long as the widgets."""
    guard = root.findChild(WheelGuard) or WheelGuard(root)
    for control in root.findChildren(QWidget):
        if isinstance(control, GUARDED) and not control.property("wheel_guarded"):
            control.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            control.installEventFilter(guard)
            control.setProperty("wheel_guarded", True)
    return guard
