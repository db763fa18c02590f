"""Scrolling over the window's controls changes nothing unless the control has focus (given
by a click or the keyboard): the side panel scrolls instead."""
from PyQt6.QtCore import QPoint, QPointF, Qt
from PyQt6.QtGui import QWheelEvent
from PyQt6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox

from app.gpu.wheel_guard import GUARDED
from app.window.main_window import MainWindow
from tests.app_helpers import isolated_settings


def _value(control):
    if isinstance(control, QComboBox):
        return control.currentIndex()
    if isinstance(control, (QAbstractSpinBox, QAbstractSlider)):
        return control.value() if hasattr(control, "value") else control.text()
    raise TypeError(control)


def _wheel(control, notches: int) -> None:
    centre = QPointF(control.rect().center())
    event = QWheelEvent(centre, QPointF(control.mapToGlobal(centre)), QPoint(0, 0), QPoint(0, -120 * notches),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(control, event)


def test_the_wheel_changes_no_unfocused_control(qtbot, tmp_path):
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    window.show()
    controls = [c for c in window.findChildren(GUARDED) if c.isVisibleTo(window) and c.isEnabled()]
    assert len(controls) >= 3, controls  # the policy, τ, K, the devices...
    window.setFocus()
    before = {id(c): _value(c) for c in controls}
    for control in controls:
        assert control.focusPolicy() == Qt.FocusPolicy.StrongFocus
        _wheel(control, 3)
        _wheel(control, -3)
        _wheel(control, 12)
    assert {id(c): _value(c) for c in controls} == before


def test_a_focused_control_takes_the_wheel(qtbot):
    from PyQt6.QtWidgets import QDoubleSpinBox, QVBoxLayout, QWidget

    from app.gpu.wheel_guard import guard_wheel
    root = QWidget()
    spin = QDoubleSpinBox(root)
    QVBoxLayout(root).addWidget(spin)
    qtbot.addWidget(root)
    guard = guard_wheel(root)
    root.show()
    _wheel(spin, 2)
    assert spin.value() == 0.0
    root.activateWindow()
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    _wheel(spin, -2)  # up
    assert spin.value() > 0.0
    assert guard is guard_wheel(root)  # guarding again reuses it
