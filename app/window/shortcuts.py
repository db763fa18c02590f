"""The window's keyboard shortcuts, in a Conversation menu (where they are shown): start/stop,
microphone mute, settings, quit. None fires while the user is typing in a text field (the role prompt, a
Hub name): there the keys are the text's."""
from __future__ import annotations

from collections.abc import Callable

from PyQt6.QtGui import QAction, QKeySequence
from PyQt6.QtWidgets import QAbstractSpinBox, QApplication, QLineEdit, QMainWindow, QPlainTextEdit, QTextEdit

SHORTCUTS = {"start_stop": "Ctrl+Space", "mute": "Ctrl+M", "settings": "Ctrl+,", "quit": "Ctrl+Q"}


def typing() -> bool:
    """Whether the focus is in an editable text field."""
    widget = QApplication.focusWidget()
    if isinstance(widget, (QPlainTextEdit, QTextEdit)):
        return not widget.isReadOnly()
    return isinstance(widget, (QLineEdit, QAbstractSpinBox))


def _unless_typing(action: Callable[[], None]) -> Callable[[], None]:
    return lambda *_: None if typing() else action()


def install(window: QMainWindow, start_stop: Callable[[], None], toggle_mute: Callable[[], None],
            open_settings: Callable[[], None]) -> dict[str, QAction]:
    """The Conversation menu with its shortcuts; returns its actions by name."""
    menu = window.menuBar().addMenu("&Conversation")
    actions = {}
    for name, text, handler in (("start_stop", "Start or stop the conversation", start_stop),
                                ("mute", "Mute or unmute the microphone", toggle_mute),
                                ("settings", "Settings…", open_settings),
                                ("quit", "Quit", window.close)):
        action = QAction(text, window)
        action.setShortcut(QKeySequence(SHORTCUTS[name]))
        action.triggered.connect(_unless_typing(handler))
        menu.addAction(action)
        actions[name] = action
    return actions


def help_text() -> str:
    return ("Keyboard shortcuts (not while typing in a text field):\n"
            f"{SHORTCUTS['start_stop']}: start or stop the conversation\n"
            f"{SHORTCUTS['mute']}: mute or unmute the microphone\n"
            f"{SHORTCUTS['settings']}: settings\n"
            f"{SHORTCUTS['quit']}: quit")
