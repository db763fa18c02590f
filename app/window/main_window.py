"""The main window: pick a model and audio devices, talk, watch the cadence panel.

The conversation comes first (the model's words, large, left), whether the model keeps up
beside it, the engine's details folded away under them. The window lays out the widgets; two
controllers drive them: the model (choosing, checking it fits, loading it) and the
conversation (start, stop, frames to the panel). Everything slow or numeric runs on engine
threads; the window only reacts to their queued signals."""
from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from PyQt6.QtCore import Qt, QTimer
from PyQt6.QtGui import QIcon
from PyQt6.QtWidgets import (
    QApplication,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..app_settings import AppSettings
from ..audio.audio_io import AudioConfig
from ..audio.device_picker import DevicePicker
from ..conversation.conversation_controller import ConversationController
from ..conversation.conversation_view import ConversationView
from ..conversation.recordings_list import RecordingsLauncher
from ..crash_reporting import CrashReporter, default_log_dir, setup_logging, show_log
from ..gpu.cuda_torch import find_nvidia_gpu, is_installed, load_manifest
from ..gpu.wheel_guard import guard_wheel
from ..models.library_controller import LibraryController
from ..models.model_controller import ModelController
from ..models.model_picker import ModelPicker
from ..project_info import project_info
from ..worker_threads import exit_past_workers
from . import shortcuts
from .cadence_panel import CadencePanel
from .message_bar import MessageBar
from .runtime_controls import machine_reasons
from .settings_dialog import SettingsDialog
from .theme import apply_theme
from .window_fit import ElidedLabel, default_size, elide_combos, keep_combos_narrow

log = logging.getLogger("duplexcadence")

HEADPHONES_HINT = ("Echo cancellation is on (Audio box): you can talk through loudspeakers. "
                   "Headphones still give the cleanest sound.")


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, device: str = "auto",
                 audio_config: AudioConfig | None = None, hub_client=None):
        """`hub_client`: the engine.HubClient the model library asks (default: huggingface_hub's
        configuration from the environment)."""
        super().__init__()
        self.info = project_info()
        self.setWindowTitle(self.info.display_name)
        self.setWindowIcon(QIcon(str(self.info.icon)))
        self.settings = settings or AppSettings()
        self._settings_report = self.settings.repair()  # before anything reads them
        self.last_dialog: QMessageBox | None = None
        self._recording_path = str(self.settings.recordings_dir)
        self._build_widgets(device)
        self._build_layout()
        self._build_menu()
        self.models = ModelController(
            self.settings, device, picker=self.model_picker, panel=self.panel, compute_label=self.compute_label,
            message_bar=self.message_bar, parent=self)
        self.library = LibraryController(
            self.settings, device, picker=self.model_picker, models=self.models, message_bar=self.message_bar,
            parent=self, hub_client=hub_client)
        self.conversation = ConversationController(
            self.models, self.settings, audio_config or AudioConfig(), start_button=self.start_button,
            stop_button=self.stop_button, record_box=self.record_box, view=self.conversation_view,
            panel=self.panel, model_picker=self.model_picker, device_picker=self.device_picker,
            message_bar=self.message_bar, parent=self)
        self._connect()
        self._wheel_guard = guard_wheel(self)  # scrolling the panel never turns a setting
        geometry = self.settings.geometry()
        # Qt's restoreGeometry moves and shrinks a geometry saved on a larger screen onto this one.
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(*default_size(self))
        self.library.rescan()  # the list says what the chosen model needs once it is known

    # --- layout -------------------------------------------------------------------------
    def _build_widgets(self, device: str) -> None:
        self.hint_bar = MessageBar("Got it")
        if not self.settings.headphones_hint_done:
            self.hint_bar.show_message(HEADPHONES_HINT, "info")
        # Said once: the values it names are gone from the settings file.
        self.settings_bar = MessageBar("Got it")
        if self._settings_report is not None:
            self.settings_bar.show_message(self._settings_report.message(), "warning")
            self.settings_bar.label.setToolTip("Back to their defaults: " + ", ".join(self._settings_report.names()))
        self.message_bar = MessageBar()
        self.model_picker = ModelPicker(self.settings)
        self.device_picker = DevicePicker(self.settings)
        self.start_button = QPushButton("Start conversation")
        self.start_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.record_box = QCheckBox("Record")
        self.record_box.setToolTip("Record each conversation: a stereo WAV (you left, the model right) and "
                                   "its transcript, in the recordings folder.")
        self.record_box.setChecked(self.settings.record)
        # The path is always shown (and can be copied): a desktop may have no file manager.
        # A long path must not widen the window: it ends in "…", and is whole in its tooltip.
        self.recording_label = ElidedLabel()
        self.recording_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_path_button = QPushButton("Copy path")
        self.change_folder_button = QPushButton("Change folder…")
        self.change_folder_button.setToolTip("Choose where recordings go (from the next conversation).")
        self.conversation_view = ConversationView([self.start_button, self.stop_button, self.record_box])
        self.transcript = self.conversation_view.text
        self.clock = self.conversation_view.clock
        self.panel = CadencePanel(self.settings.runtime_options, machine=machine_reasons(device))
        self.panel.engine_pane.set_expanded(self.settings.engine_pane_open)
        self.recordings_list = RecordingsLauncher(self, lambda: self.settings.recordings_dir)
        self._show_recording_path(self.settings.recordings_dir, "Recordings")
        self.compute_label = QLabel("Compute: no model loaded")
        # Where recordings go, on the status bar's line: every row of height counts on a 720 px screen.
        # A status message takes the path's place for a while (it is the one normal widget).
        self.statusBar().addWidget(self.recording_label, 1)
        for widget in (self.recordings_list.button, self.change_folder_button, self.copy_path_button,
                       self.compute_label):
            self.statusBar().addPermanentWidget(widget)

    def _build_layout(self) -> None:
        pickers = QHBoxLayout()
        pickers.addWidget(self.model_picker, 1)
        pickers.addWidget(self.device_picker, 1)
        keep_combos_narrow(self.model_picker, self.device_picker)
        central = QWidget()
        layout = QVBoxLayout(central)
        for item in (self.settings_bar, self.hint_bar, self.message_bar):
            layout.addWidget(item)
        layout.addLayout(pickers)
        layout.addWidget(self._conversation_area(), 1)
        self.setCentralWidget(central)
        elide_combos(central)

    def _conversation_area(self) -> QSplitter:
        """The conversation, then the cadence panel beside it."""
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.conversation_view)
        # The panel scrolls where the window has no room for all of it (the Engine pane open,
        # message bars on a small screen) rather than being cut; its chart gives way first.
        self.panel_area = QScrollArea()
        self.panel_area.setWidget(self.panel)
        self.panel_area.setWidgetResizable(True)
        self.panel_area.setFrameShape(QScrollArea.Shape.NoFrame)
        self.panel_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll_bar = self.panel_area.verticalScrollBar().sizeHint().width()
        self.panel_area.setMinimumWidth(self.panel.minimumWidth() + scroll_bar)
        splitter.addWidget(self.panel_area)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setSizes([720, 480])
        return splitter

    def _connect(self) -> None:
        self.conversation_view.failed.connect(self.message_bar.show_message)
        self.panel.engine_pane.toggled.connect(self._on_engine_pane)
        self.conversation.status.connect(self._show_status)
        self.conversation.recording_shown.connect(self._show_recording_path)
        # The user's choices, remembered as they are made.
        self.record_box.toggled.connect(lambda on: setattr(self.settings, "record", on))
        self.panel.options_changed.connect(
            lambda _: setattr(self.settings, "runtime_options", self.panel.chosen_options()))
        self.hint_bar.dismissed.connect(
            lambda: setattr(self.settings, "headphones_hint_done", True))
        self.copy_path_button.clicked.connect(self.copy_recording_path)
        self.change_folder_button.clicked.connect(lambda: self.set_recordings_folder(QFileDialog.getExistingDirectory(
            self, "Recordings folder", str(self.settings.recordings_dir))))

    def _build_menu(self) -> None:
        self.shortcuts = shortcuts.install(self, self._start_or_stop,
                                           lambda: self.device_picker.set_muted(not self.device_picker.is_muted()),
                                           self.open_settings)
        self.recordings_list.insert_before(self.shortcuts["quit"])
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction("Keyboard shortcuts", lambda: QMessageBox.information(
            self, "Keyboard shortcuts", shortcuts.help_text()))
        self.gpu_action = help_menu.addAction("Install GPU support…", lambda: self.offer_gpu_support())
        self.gpu_action.setVisible(self._gpu_offer() is not None)
        help_menu.addAction("Show log", self.open_log)
        help_menu.addAction(f"About {self.info.display_name}", self.show_about)

    def open_settings(self) -> None:
        """The Settings dialog, modal to the window only: a conversation goes on behind it."""
        loaded = self.models.loaded
        persona = self.model_picker.persona() if loaded is not None and loaded.takes_role else None  # PersonaPlex
        self.settings_dialog = dialog = SettingsDialog(self.settings, self, persona=persona)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # one per opening, gone when closed
        dialog.sampling_changed.connect(self.panel.set_sampling)
        dialog.persona_chosen.connect(self._use_persona)
        dialog.recordings_folder_changed.connect(lambda folder: self._show_recording_path(Path(folder), "Recordings"))
        dialog.theme_changed.connect(lambda theme: apply_theme(QApplication.instance(), theme))
        dialog.open()

    def _use_persona(self, voice: str, role: str) -> None:
        if not self.model_picker.set_persona(voice, role):
            self.message_bar.show_message(f"This model has no voice {voice}: the preset's role is set, "
                                          "its voice is not.", "warning")

    def _on_engine_pane(self, expanded: bool) -> None:
        self.settings.engine_pane_open = expanded
        if expanded:  # show what was opened
            area = self.panel_area
            QTimer.singleShot(0, lambda: area.verticalScrollBar().setValue(self.panel.engine_pane.y()))

    def _start_or_stop(self) -> None:
        if self.stop_button.isEnabled():
            self.conversation.stop()
        elif self.start_button.isEnabled():
            self.conversation.start()

    def open_log(self) -> None:
        """The log in the desktop's viewer, else its folder, else a dialog saying where it is."""
        self.last_dialog = show_log(self) or self.last_dialog

    def show_about(self) -> None:
        info = self.info
        compute = self.compute_label.text()
        self.last_dialog = QMessageBox(QMessageBox.Icon.NoIcon, f"About {info.display_name}",
                                       f"<h3>{info.display_name} {info.version}</h3><p>{info.summary}</p>"
                                       f"<p>{compute}</p><p>Log: {default_log_dir()}</p>",
                                       QMessageBox.StandardButton.Ok, self)
        self.last_dialog.setIconPixmap(QIcon(str(info.icon)).pixmap(96, 96))
        self.last_dialog.open()

    def _gpu_offer(self):
        """(manifest, gpu) when GPU support can be fetched here and is not yet: an installed
        app (it has the manifest), an NVIDIA GPU, nothing installed. Else None."""
        manifest = load_manifest()
        if manifest is None or is_installed(manifest):
            return None
        gpu = find_nvidia_gpu()
        return (manifest, gpu) if gpu is not None else None

    def offer_gpu_support(self, first_run: bool = False) -> None:
        offer = self._gpu_offer()
        if offer is None:
            return
        manifest, gpu = offer
        if first_run and self.settings.gpu_support_offered:
            return
        self.settings.gpu_support_offered = True
        if gpu.driver_cuda < manifest.driver_cuda_needed:
            self.message_bar.show_message(
                f"{gpu.name} found, but its driver runs CUDA up to {gpu.driver_cuda_text}; GPU support needs "
                f"CUDA {manifest.cuda}. Update the NVIDIA driver, then choose Help ▸ Install GPU support.", "info")
            return
        from ..gpu.gpu_support_dialog import GpuSupportDialog
        self.gpu_dialog = GpuSupportDialog(manifest, gpu, self)
        self.gpu_dialog.open()

    def _show_status(self, text: str) -> None:
        if text:
            self.statusBar().showMessage(text)
        else:
            self.statusBar().clearMessage()

    def set_recordings_folder(self, folder: str) -> None:
        """Recordings go to `folder` from the next conversation ("" from a cancelled dialog: no change)."""
        if not folder:
            return
        self.settings.recordings_dir = folder
        self._show_recording_path(self.settings.recordings_dir, "Recordings")

    def copy_recording_path(self) -> None:
        """The last recording's path once there is one, else the recordings folder's."""
        QApplication.clipboard().setText(self._recording_path)

    def _show_recording_path(self, path: Path, what: str) -> None:
        self._recording_path = str(path)
        self.recording_label.setText(f"{what}: {path}")
        self.recording_label.setToolTip(str(path))
        self.recordings_list.note_recording(path, what)

    def closeEvent(self, event) -> None:
        self.library.cancel_download()  # complete files stay in the cache for next time
        self.conversation.stop_and_wait()
        self.settings.set_geometry(self.saveGeometry())
        super().closeEvent(event)


def run_app(model: str | None = None, device: str = "auto") -> int:
    """Open the window (optionally loading `model` at once, on `device`: auto, cuda or cpu)
    and run until it is closed; returns the exit status."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    info = project_info()
    app.setOrganizationName("DuplexCadence")
    app.setApplicationName(info.display_name)
    app.setApplicationVersion(info.version)
    app.setDesktopFileName(info.app_id)  # Wayland matches the window to the desktop entry by it
    reporter = CrashReporter(setup_logging(default_log_dir()))
    log.info("%s %s started (%s, Python %s)", info.display_name, info.version,
             "installed bundle" if getattr(sys, "frozen", False) else "from source", sys.version.split()[0])
    settings = AppSettings()
    apply_theme(app, settings.theme)  # before the first widget: it paints in the chosen colours
    window = MainWindow(settings, device=device)
    reporter.parent_window = window
    from ..audio.echo_cancel import unavailable
    log.info("echo cancellation: %s", unavailable() or "available (WebRTC AEC3, livekit)")
    window.show()
    # A session logout or `kill` closes the window as its close button does (a recording in
    # progress is finished), not mid-frame. Python runs signal handlers only between bytecodes,
    # so a timer gives it the chance while Qt waits for events.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: QTimer.singleShot(0, window.close))
    heartbeat = QTimer(interval=250, timeout=lambda: None)
    heartbeat.start()
    if model:
        window.model_picker.select(model)
        window.models.load()
    QTimer.singleShot(0, lambda: window.offer_gpu_support(first_run=True))
    try:
        status = app.exec()
        log.info("exiting (status %d)", status)
    finally:
        reporter.uninstall()
    settings.q.sync()
    exit_past_workers(status)
    return status
