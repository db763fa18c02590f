"""The Recordings window: the conversations in the recordings folder (and in the doubled
folder earlier versions wrote to), newest first, to open, reveal, copy or delete, with what
the model said in each."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PyQt6.QtCore import QFile, QFileSystemWatcher, QObject, Qt, QTimer, QUrl
from PyQt6.QtGui import QAction, QDesktopServices, QKeySequence, QShortcut
from PyQt6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from .recording_files import Recording, clock, list_recordings, older_recordings_dir, size_text, transcript_text

COLUMNS = ("Started", "Length", "Model", "Transcript", "Size", "Note")
REFRESH_DELAY_MS = 300  # a recording in progress changes the folder about once a second


def _row(rec: Recording, notes: list[str]) -> list[str]:
    started = rec.started.strftime("%Y-%m-%d %H:%M:%S") if rec.started else "?"
    length = clock(rec.seconds) if rec.seconds is not None else "?"
    if rec.words is None:
        transcript = "unreadable" if rec.json.exists() else "none"
    else:
        transcript = f"{len(rec.words)} words" if rec.words else "no words"
    return [started, length, rec.model or "?", transcript, size_text(rec.size), "; ".join(notes + rec.problems)]


def _folders(folder: Path) -> list[Path]:
    """The chosen folder, and the older one unless it is the same."""
    folder, older = Path(folder), older_recordings_dir()
    return [folder] if older.resolve() == folder.resolve() else [folder, older]


class RecordingsDialog(QDialog):
    def __init__(self, folder: Path, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Recordings")
        self.setModal(False)
        self.folders = _folders(folder)
        self.live: Path | None = None
        self.recordings: list[Recording] = []
        self.where = QLabel()
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAllColumnsShowFocus(True)
        self.tree.setAlternatingRowColors(True)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setPlaceholderText("Select a recording to read what the model said.")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Play the recording (stereo: you on the left, the model on the right).")
        self.reveal_button = QPushButton("Show in folder")
        self.copy_button = QPushButton("Copy path")
        self.delete_button = QPushButton("Delete…")
        self.refresh_button = QPushButton("Refresh")
        self.close_button = QPushButton("Close")
        self._layout()
        self.watcher = QFileSystemWatcher(self)
        self._refresh_timer = QTimer(self, singleShot=True, interval=REFRESH_DELAY_MS)
        self._connect()
        self.resize(860, 540)
        self.refresh()

    def _layout(self) -> None:
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.tree)
        preview = QWidget()
        preview_layout = QVBoxLayout(preview)
        preview_layout.setContentsMargins(0, 0, 0, 0)
        preview_layout.addWidget(QLabel("What the model said"))
        preview_layout.addWidget(self.preview)
        splitter.addWidget(preview)
        splitter.setSizes([330, 150])
        buttons = QHBoxLayout()
        for button in (self.open_button, self.reveal_button, self.copy_button, self.delete_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

    def _connect(self) -> None:
        self.tree.itemSelectionChanged.connect(self._show_selected)
        self.tree.itemActivated.connect(lambda *_: self.open_selected())  # double-click, Enter
        QShortcut(QKeySequence.StandardKey.Delete, self.tree, self.delete_selected)
        self.open_button.clicked.connect(self.open_selected)
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.copy_button.clicked.connect(self.copy_selected_path)
        self.delete_button.clicked.connect(self.delete_selected)
        self.refresh_button.clicked.connect(self.refresh)
        self.close_button.clicked.connect(self.close)
        self.watcher.directoryChanged.connect(lambda _: self._refresh_timer.start())
        self._refresh_timer.timeout.connect(self.refresh)

    def set_folder(self, folder: Path) -> None:
        """The recordings folder changed (in the settings)."""
        self.folders = _folders(folder)
        self.refresh()

    def set_live(self, wav: Path | None) -> None:
        """The recording a conversation is writing now (None: none): it cannot be deleted."""
        self.live = Path(wav) if wav else None
        self.refresh()

    def selected(self) -> Recording | None:
        item = self.tree.currentItem()
        return self.recordings[self.tree.indexOfTopLevelItem(item)] if item and item.isSelected() else None

    def refresh(self) -> None:
        keep = self.selected()
        scroll = self.tree.verticalScrollBar().value()
        self.recordings = list_recordings(self.folders)
        self.tree.clear()
        for rec in self.recordings:
            notes = ["recording now"] if rec.wav == self.live else []
            notes += ["in the older folder"] if rec.wav.parent != self.folders[0] else []
            item = QTreeWidgetItem(_row(rec, notes))
            item.setToolTip(0, str(rec.wav))
            item.setToolTip(5, "\n".join(rec.problems))
            for column in (1, 4):
                item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.tree.addTopLevelItem(item)
            if keep and rec.wav == keep.wav:
                self.tree.setCurrentItem(item)
        for column in range(len(COLUMNS) - 1):
            self.tree.resizeColumnToContents(column)
        self.tree.verticalScrollBar().setValue(scroll)
        self._watch()
        self._show_where()
        self._show_selected()

    def _watch(self) -> None:
        """The folders that exist; the chosen folder's nearest existing parent until it does,
        so the first recording shows up."""
        wanted = {str(f) for f in self.folders if f.is_dir()}
        if not self.folders[0].is_dir():
            parent = next((p for p in self.folders[0].parents if p.is_dir()), None)
            wanted |= {str(parent)} if parent else set()
        current = set(self.watcher.directories())
        if current - wanted:
            self.watcher.removePaths(sorted(current - wanted))
        if wanted - current:
            self.watcher.addPaths(sorted(wanted - current))

    def _show_where(self) -> None:
        folder, *older = self.folders
        text = f"Recordings are saved in {folder}"
        if older and any(r.wav.parent == older[0] for r in self.recordings):
            text += f"; also listed: those in {older[0]}, where earlier versions saved them"
        if not self.recordings:
            text += ". There are none yet: tick Record and start a conversation."
        self.where.setText(text)

    def _show_selected(self) -> None:
        rec = self.selected()
        for button in (self.open_button, self.copy_button, self.delete_button):
            button.setEnabled(rec is not None)
        self.open_button.setEnabled(rec is not None and rec.wav.exists())
        self.delete_button.setEnabled(rec is not None and rec.wav != self.live)
        if rec is None:
            text = ""
        elif rec.words:
            text = transcript_text(rec.words)
        elif rec.words is not None:
            text = "The model said nothing in this recording."
        elif rec.problems:
            text = "\n".join(rec.problems) + f"\n\n{rec.json}"
        else:
            text = "No transcript beside this recording."
        if text != self.preview.toPlainText():  # a refresh while recording keeps the reader's place
            self.preview.setPlainText(text)

    def open_selected(self) -> None:
        rec = self.selected()
        if rec and not QDesktopServices.openUrl(QUrl.fromLocalFile(str(rec.wav))):
            QApplication.clipboard().setText(str(rec.wav))
            self.status.setText(f"No player opened {rec.wav.name}; its path is on the clipboard.")

    def reveal_selected(self) -> None:
        rec = self.selected()
        folder = rec.wav.parent if rec else self.folders[0]
        if not folder.is_dir():
            self.status.setText(f"{folder} does not exist yet: the first recording creates it.")
        elif not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            QApplication.clipboard().setText(str(folder))
            self.status.setText(f"No file manager opened the folder; its path is on the clipboard: {folder}")

    def copy_selected_path(self) -> None:
        rec = self.selected()
        if rec:
            QApplication.clipboard().setText(str(rec.wav))
            self.status.setText(f"Copied: {rec.wav}")

    def delete_selected(self) -> None:
        """The WAV and its transcript, after a confirmation naming them: to the trash where
        this system has one, else deleted."""
        rec = self.selected()
        files = [p for p in (rec.wav, rec.json) if p.exists()] if rec and rec.wav != self.live else []
        if not files:
            return
        names = " and ".join(p.name for p in files)
        confirm = QMessageBox(QMessageBox.Icon.Question, "Delete recording", f"Delete {names}?",
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        confirm.setInformativeText(f"In {rec.wav.parent}. They go to the trash where this system has "
                                   "one; otherwise they are deleted for good.")
        confirm.setDefaultButton(QMessageBox.StandardButton.Cancel)
        if confirm.exec() != QMessageBox.StandardButton.Yes:
            return
        trashed, deleted, failed = [], [], []
        for path in files:
            if QFile.moveToTrash(str(path))[0]:
                trashed.append(path.name)
                continue
            try:
                path.unlink()
                deleted.append(path.name)
            except OSError as exc:
                failed.append(f"{path.name} ({exc.strerror})")
        said = []
        if trashed:
            said.append(f"Moved {' and '.join(trashed)} to the trash.")
        if deleted:
            said.append(f"Deleted {' and '.join(deleted)} (no trash here).")
        if failed:
            said.append(f"Could not delete {', '.join(failed)}.")
        self.status.setText(" ".join(said))
        self.refresh()


class RecordingsLauncher(QObject):
    """The main window's way in: a "Recordings…" action for a menu and a button for the
    recordings row, both opening one non-modal RecordingsDialog that follows the recordings
    folder (`folder` says which it is now) and knows the recording being written."""

    def __init__(self, window: QWidget, folder: Callable[[], Path]):
        super().__init__(window)
        self._window, self._folder = window, folder
        self.dialog: RecordingsDialog | None = None
        self._live: Path | None = None
        self.action = QAction("Recordings…", window)
        self.button = QPushButton("Recordings…")
        self.button.setToolTip("The recordings: play, read, reveal or delete them.")
        for trigger in (self.action.triggered, self.button.clicked):
            trigger.connect(self.show)

    def insert_before(self, action: QAction) -> None:
        """Into the menus that hold `action` (e.g. before Quit), with a separator."""
        for menu in action.associatedObjects():
            if isinstance(menu, QMenu):
                menu.insertAction(action, self.action)
                menu.insertSeparator(action)

    def show(self) -> None:
        if self.dialog is None:
            self.dialog = RecordingsDialog(self._folder(), self._window)
            self.dialog.set_live(self._live)
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()

    def note_recording(self, path: Path, what: str) -> None:
        """What the window shows on its recordings row (ConversationController.recording_shown
        and a changed folder): "Recording to" is the file a conversation writes now."""
        self._live = Path(path) if what == "Recording to" else None
        if self.dialog is not None:
            if self.dialog.folders[0] != Path(self._folder()):
                self.dialog.set_folder(self._folder())
            self.dialog.set_live(self._live)
