"""Unhandled exceptions, on any thread, are written to a log file in the user's log folder
and reported in a short dialog (what went wrong, where the details are), never a raw
traceback and never a silent exit."""
from __future__ import annotations

import logging
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path

from PyQt6.QtCore import QObject, QStandardPaths, Qt, QUrl, pyqtSignal
from PyQt6.QtGui import QDesktopServices
from PyQt6.QtWidgets import QMessageBox, QWidget

log = logging.getLogger("duplexcadence")
LOG_NAME = "duplexcadence.log"


def default_log_dir() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppLocalDataLocation)
    return Path(base) / "logs"


def show_log(parent: QWidget, path: Path | None = None) -> QMessageBox | None:
    """Help → Show log: the log file (default: the app's) in the desktop's viewer, else its folder
    in the file manager; where neither opens (no desktop handler), a dialog with its path, which
    it returns (open, for the caller to keep)."""
    path = path or default_log_dir() / LOG_NAME
    for target in (path, path.parent):
        if target.exists() and QDesktopServices.openUrl(QUrl.fromLocalFile(str(target))):
            return None
    text = f"The log is {path}" if path.exists() else f"Nothing is logged yet; the log will be {path}"
    box = QMessageBox(QMessageBox.Icon.Information, "Log", f"{text} (this desktop opened neither it nor its "
                      "folder).", QMessageBox.StandardButton.Ok, parent)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.open()
    return box


def setup_logging(log_dir: Path) -> Path:
    """Route the app's and the engine's log records to a rotating file; returns its path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / LOG_NAME
    handler = RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8",
                                  delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s "
                                           "%(name)s: %(message)s"))
    for name in ("duplexcadence", "engine"):
        logger = logging.getLogger(name)
        if not any(getattr(h, "baseFilename", None) == str(path) for h in logger.handlers):
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return path


class CrashReporter(QObject):
    """Installs itself as `sys.excepthook` and `threading.excepthook`. Reports cross to the
    GUI thread through a queued signal, since the failing thread may not be the GUI's."""

    reported = pyqtSignal(str)

    def __init__(self, log_path: Path, parent_window: QWidget | None = None):
        super().__init__()
        self.log_path = log_path
        self.parent_window = parent_window
        self.last_dialog: QMessageBox | None = None
        self.reported.connect(self._show)
        self._previous = (sys.excepthook, threading.excepthook)
        sys.excepthook = self._on_exception
        threading.excepthook = lambda args: self._on_exception(
            args.exc_type, args.exc_value, args.exc_traceback)

    def uninstall(self) -> None:
        sys.excepthook, threading.excepthook = self._previous

    def _on_exception(self, exc_type, exc_value, exc_tb) -> None:
        log.error("Unhandled exception", exc_info=(exc_type, exc_value, exc_tb))
        for handler in log.handlers:
            handler.flush()
        self.reported.emit(f"{exc_type.__name__}: {exc_value}")

    def _show(self, summary: str) -> None:
        box = QMessageBox(QMessageBox.Icon.Critical, "DuplexCadence: unexpected error",
                          "Something went wrong, but the app is still running.",
                          QMessageBox.StandardButton.Ok, self.parent_window)
        box.setInformativeText(f"{summary}\n\nThe details were written to:\n{self.log_path}")
        box.addButton("Show log", QMessageBox.ButtonRole.ActionRole).clicked.connect(
            lambda: show_log(self.parent_window, self.log_path))
        box.setModal(False)
        box.show()
        self.last_dialog = box
