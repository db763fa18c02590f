"""Keyboard shortcuts: start/stop, microphone mute and quit, shown in the Conversation menu and
in Help, and never acting while the user types in a text field."""
from PyQt6.QtGui import QKeySequence
from PyQt6.QtWidgets import QLineEdit

from app.window.main_window import MainWindow
from app.window.shortcuts import help_text
from tests.app_helpers import isolated_settings


def test_shortcuts_act_and_wait_while_typing(qtbot, tmp_path):
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    window.show()
    actions = window.shortcuts
    assert {name: a.shortcut().toString() for name, a in actions.items()} == {
        "start_stop": QKeySequence("Ctrl+Space").toString(), "mute": "Ctrl+M", "settings": "Ctrl+,",
        "quit": "Ctrl+Q"}
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Conversation")
    assert all(a in menu.actions() for a in actions.values())
    assert "Ctrl+M" in help_text()

    assert not window.device_picker.is_muted()
    actions["mute"].trigger()
    assert window.device_picker.is_muted()
    actions["settings"].trigger()
    assert window.settings_dialog.isVisible()
    window.settings_dialog.reject()

    started = []
    window.conversation.start = lambda feed=None: started.append(True)
    window.start_button.setEnabled(True)
    actions["start_stop"].trigger()
    assert started == [True]

    # A text field (as the role prompt of a PersonaPlex model): while typing, the keys are the text's.
    role = QLineEdit(window.centralWidget())
    role.show()
    window.activateWindow()
    role.setFocus()
    qtbot.waitUntil(role.hasFocus, timeout=2000)
    actions["mute"].trigger()
    actions["start_stop"].trigger()
    actions["quit"].trigger()
    assert window.device_picker.is_muted() and started == [True] and window.isVisible()

    window.setFocus()
    qtbot.waitUntil(lambda: not role.hasFocus(), timeout=2000)
    actions["quit"].trigger()
    assert not window.isVisible()
