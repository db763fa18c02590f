"""The main window: pick a model and audio devices, talk, watch the cadence panel.

Everything slow or numeric runs on engine threads (model loading, the conversation); this
window only reacts to their queued signals."""
from __future__ import annotations

import dataclasses
import logging
import signal
import sys
from pathlib import Path

import soundfile as sf
from PyQt6.QtCore import Qt, QTimer, QUrl
from PyQt6.QtGui import QDesktopServices, QIcon, QTextCursor
from PyQt6.QtWidgets import (
    QApplication,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from .app_settings import AppSettings
from .audio_io import AudioConfig, AudioDeviceError, AudioLink
from .cadence_panel import CadencePanel
from .cadence_stats import FRAME_S
from .conversation import ConversationEnd, ConversationSignals, ConversationWorker, FrameReport
from .crash_reporting import CrashReporter, default_log_dir, setup_logging
from .cuda_torch import find_nvidia_gpu, is_installed, load_manifest
from .device_picker import DevicePicker
from .message_bar import MessageBar
from .model_loader import CheckpointScan, LoadedModel, LoaderSignals, MemoryCheck, ModelLoader, PredictorLoader
from .model_picker import ModelPicker
from .project_info import project_info
from .recorder import ConversationRecorder

log = logging.getLogger("duplexcadence")

HEADPHONES_HINT = ("Tip: use headphones. Through loudspeakers the model hears its own voice "
                   "and may answer itself.")


class MainWindow(QMainWindow):
    def __init__(self, settings: AppSettings | None = None, device: str = "auto",
                 audio_config: AudioConfig | None = None):
        super().__init__()
        self.info = project_info()
        self.setWindowTitle(self.info.display_name)
        self.setWindowIcon(QIcon(str(self.info.icon)))
        self.settings = settings or AppSettings()
        self.compute_device = device
        self.audio_config = audio_config or AudioConfig()
        self.loaded: LoadedModel | None = None
        self.worker: ConversationWorker | None = None
        self.loader: ModelLoader | None = None
        self.last_dialog: QMessageBox | None = None
        self.last_end: ConversationEnd | None = None
        self._start_when_loaded = False
        self._pending_feed = None
        self._backlog_cap: float | None = None
        self._recording_path = str(self.settings.recordings_dir)
        self._build()
        self._build_menu()
        self._connect()
        geometry = self.settings.geometry()
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1100, 720)
        CheckpointScan(self.loader_signals).start()
        self.check_memory()

    # --- layout -------------------------------------------------------------------------
    def _build(self) -> None:
        self.hint_bar = MessageBar("Got it")
        if not self.settings.headphones_hint_done:
            self.hint_bar.show_message(HEADPHONES_HINT, "info")
        self.message_bar = MessageBar()
        self.model_picker = ModelPicker(self.settings)
        self.device_picker = DevicePicker(self.settings)
        self.start_button = QPushButton("Start conversation")
        self.start_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.record_box = QCheckBox("Record (stereo WAV + transcript)")
        self.record_box.setChecked(self.settings.record)
        self.recordings_button = QPushButton("Open recordings folder")
        # The path is always shown (and can be copied): a desktop may have no file manager.
        self.recording_label = QLabel(f"Recordings: {self.settings.recordings_dir}")
        self.recording_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_path_button = QPushButton("Copy path")
        self.clock = QLabel("0:00")
        self.transcript = QPlainTextEdit()
        self.transcript.setReadOnly(True)
        self.transcript.setPlaceholderText("What the model says appears here.")
        self.panel = CadencePanel(self.settings.runtime_options)
        self.compute_label = QLabel("Compute: no model loaded")
        self.statusBar().addPermanentWidget(self.compute_label)

        pickers = QHBoxLayout()
        pickers.addWidget(self.model_picker, 1)
        pickers.addWidget(self.device_picker, 1)
        buttons = QHBoxLayout()
        for widget in (self.start_button, self.stop_button, self.clock):
            buttons.addWidget(widget)
        buttons.addStretch(1)
        buttons.addWidget(self.record_box)
        buttons.addWidget(self.recordings_button)
        buttons.addWidget(self.copy_path_button)
        recording_row = QHBoxLayout()
        recording_row.addWidget(self.recording_label, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("Transcript (model)"))
        left_layout.addWidget(self.transcript)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        # The panel scrolls rather than squeezes its switches when the window is short.
        panel_area = QScrollArea()
        panel_area.setWidget(self.panel)
        panel_area.setWidgetResizable(True)
        panel_area.setFrameShape(QScrollArea.Shape.NoFrame)
        splitter.addWidget(panel_area)
        splitter.setSizes([450, 650])
        central = QWidget()
        layout = QVBoxLayout(central)
        for item in (self.hint_bar, self.message_bar):
            layout.addWidget(item)
        layout.addLayout(pickers)
        layout.addLayout(buttons)
        layout.addLayout(recording_row)
        layout.addWidget(splitter, 1)
        self.setCentralWidget(central)

    def _build_menu(self) -> None:
        help_menu = self.menuBar().addMenu("&Help")
        self.gpu_action = help_menu.addAction("Install GPU support…", lambda: self.offer_gpu_support())
        self.gpu_action.setVisible(self._gpu_offer() is not None)
        help_menu.addAction("Open log folder", lambda: QDesktopServices.openUrl(
            QUrl.fromLocalFile(str(default_log_dir()))))
        help_menu.addAction(f"About {self.info.display_name}", self.show_about)

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
        from .gpu_support_dialog import GpuSupportDialog
        self.gpu_dialog = GpuSupportDialog(manifest, gpu, self)
        self.gpu_dialog.open()

    def _connect(self) -> None:
        self.loader_signals = LoaderSignals()
        self.loader_signals.progress.connect(self.model_picker.set_loading)
        self.loader_signals.loaded.connect(self.set_model)
        self.loader_signals.failed.connect(self._on_load_failed)
        self.loader_signals.checkpoints.connect(self.model_picker.add_checkpoints)
        self.loader_signals.fit.connect(self.model_picker.show_fit)
        self.model_picker.choice_changed.connect(self.check_memory)
        self.conversation_signals = ConversationSignals()
        self.conversation_signals.started.connect(
            lambda: self.statusBar().showMessage("Conversation running."))
        self.conversation_signals.frame.connect(self._on_frame)
        self.conversation_signals.notice.connect(lambda text: self.statusBar().showMessage(text))
        self.conversation_signals.failed.connect(self.message_bar.show_message)
        self.conversation_signals.finished.connect(self._on_finished)
        self.model_picker.load_requested.connect(lambda _: self.load_model())
        self.start_button.clicked.connect(lambda: self.start_conversation())
        self.stop_button.clicked.connect(self.stop_conversation)
        self.record_box.toggled.connect(lambda on: setattr(self.settings, "record", on))
        self.recordings_button.clicked.connect(self.open_recordings)
        self.copy_path_button.clicked.connect(self.copy_recording_path)
        self.device_picker.muted_changed.connect(self._on_muted)
        self.panel.controls.changed.connect(self._on_options)
        self.panel.controls.adapter_requested.connect(self.choose_predictor)
        self.predictor_signals = LoaderSignals()
        self.predictor_signals.predictor.connect(self._on_predictor)
        self.predictor_signals.failed.connect(
            lambda _, message: self._predictor_done() and self.message_bar.show_message(message))
        self.hint_bar.dismissed.connect(
            lambda: setattr(self.settings, "headphones_hint_done", True))

    # --- model --------------------------------------------------------------------------
    def load_model(self) -> None:
        if (self.loader is not None and self.loader.is_alive()) or self.worker is not None:
            return
        source = self.model_picker.source()
        self.settings.model_source = source
        previous, self.loaded = self.loaded, None  # freed first: two 7B models rarely fit
        self.compute_label.setText("Compute: loading…")
        self.panel.controls.apply_capabilities(None)
        self.start_button.setEnabled(False)
        self.model_picker.set_loading(f"Loading {source}…")
        self.loader = ModelLoader(source, self.compute_device, self.loader_signals, previous,
                                  self.model_picker.chosen_weights())
        self.loader.start()

    def check_memory(self) -> None:
        """Whether the chosen model and weights fit, shown in the picker before loading."""
        self.model_picker.fit.setText("Checking the memory it needs…")
        MemoryCheck(self.model_picker.source(), self.model_picker.chosen_weights(), self.compute_device,
                    self.loader_signals).start()

    def set_model(self, loaded: LoadedModel) -> None:
        """Talk with this (loaded) model from now on."""
        self.loaded = loaded
        self.model_picker.set_done(f"Loaded {loaded.name} on {loaded.device_label}.")
        self.model_picker.fit.setText(loaded.memory)
        self.model_picker.fit.setStyleSheet("")
        self.model_picker.show_persona(loaded.voices, loaded.default_role)
        # Where the model runs, and why there (on the CPU: no GPU, no driver, or no GPU support yet).
        self.compute_label.setText(f"Compute: {loaded.device_reason}")
        log.info("loaded %s on %s (%s)", loaded.source, loaded.device_label, loaded.device_reason)
        self.panel.controls.apply_capabilities(loaded.capabilities)
        self.panel.controls.adapter_label.setText(loaded.predictor or "none")
        if loaded.notice:
            self.message_bar.show_message(loaded.notice, "info")
        self.start_button.setEnabled(True)
        if self._start_when_loaded:
            self._start_when_loaded = False
            self.start_conversation()

    def _on_load_failed(self, source: str, message: str) -> None:
        self._start_when_loaded, self._pending_feed = False, None
        self.compute_label.setText("Compute: no model loaded")
        self.model_picker.set_done(f"Could not load {source}.")
        self.start_button.setEnabled(True)
        self.last_dialog = QMessageBox(QMessageBox.Icon.Critical, "Could not load the model",
                                       message, QMessageBox.StandardButton.Ok, self)
        self.last_dialog.open()

    # --- conversation -------------------------------------------------------------------
    def start_conversation(self, feed=None) -> None:
        """Talk through the chosen devices, or through `feed` (e.g. a FileFeed)."""
        if self.worker is not None:
            return
        if self.loaded is None or self.loaded.source != self.model_picker.source():
            self._start_when_loaded = True
            self._pending_feed = feed
            self.load_model()
            return
        feed, self._pending_feed = feed or self._pending_feed, None
        self.message_bar.hide()
        link = feed or self._open_audio()
        if link is None:
            return
        self._backlog_cap = self.audio_config.max_input_backlog_s if feed is None else None
        persona = None
        if self.loaded.voices:
            voice, role = self.model_picker.persona()
            self.settings.set_persona(self.model_picker.voice.currentText(), role)
            persona = (voice, role or self.loaded.default_role)
        options = self.panel.controls.options()
        recorder = None
        if self.record_box.isChecked():
            try:
                recorder = ConversationRecorder(self.settings.recordings_dir, self.loaded.name,
                                                dataclasses.asdict(options))
            except (OSError, sf.SoundFileError) as exc:
                link.close()
                self.message_bar.show_message(f"Cannot write the recording: {exc}")
                return
        self.panel.reset()
        if recorder is not None:
            self._show_recording_path(recorder.wav_path, "Recording to")
        self.transcript.appendPlainText(f"[{self.loaded.name} · {link.description}]\n")
        self.worker = ConversationWorker(self.loaded.session, link, recorder, persona, self.conversation_signals)
        self.worker.set_options(options)  # before the thread starts: later switches come after it
        self.worker.set_muted(self.device_picker.mute.isChecked())
        self.worker.start()
        self._set_running(True)

    def _open_audio(self) -> AudioLink | None:
        microphone = self.device_picker.selected("input")
        speaker = self.device_picker.selected("output")
        if microphone is None or speaker is None:
            missing = "microphone" if microphone is None else "speaker"
            self.message_bar.show_message(
                f"No {missing} found. Connect one, then press Refresh in the Audio box.")
            return None
        try:
            return AudioLink(microphone, speaker, self.audio_config)
        except AudioDeviceError as exc:
            self.message_bar.show_message(str(exc))
            return None

    def stop_conversation(self) -> None:
        """Silence at once; the engine thread finishes its current frame and exits."""
        if self.worker is None:
            return
        self.worker.stop()
        self.worker.link.close()
        self.stop_button.setEnabled(False)
        self.statusBar().showMessage("Stopping…")

    def _on_frame(self, report: FrameReport) -> None:
        if report.text:
            self.transcript.moveCursor(QTextCursor.MoveOperation.End)
            self.transcript.insertPlainText(report.text)
        self.panel.add_frame(report.timings, list(report.speak_s), report.gpu_memory,
                             report.counters, self._backlog_cap, report.state_memory, report.diffuplex)
        self.device_picker.set_level(report.level_dbfs)
        seconds = int((report.index + 1) * FRAME_S)
        self.clock.setText(f"{seconds // 60}:{seconds % 60:02d}")

    def _on_finished(self, end: ConversationEnd) -> None:
        self.last_end = end
        if self.worker is not None:
            self.worker.join(timeout=1.0)
        self.worker = None
        self._set_running(False)
        self.transcript.appendPlainText("")
        if end.recording is not None:
            self.statusBar().showMessage(f"Recording saved: {end.recording}")
            self._show_recording_path(end.recording, "Last recording")
        else:
            self.statusBar().clearMessage()

    def _set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.record_box.setEnabled(not running)
        self.model_picker.set_controls_enabled(not running)
        self.model_picker.voice.setEnabled(not running)
        self.model_picker.role.setEnabled(not running)
        self.device_picker.set_running(running)

    def _on_options(self, options) -> None:
        self.settings.runtime_options = self.panel.controls.chosen()
        if self.worker is not None:
            self.worker.set_options(options)

    def choose_predictor(self, path: str | None = None) -> None:
        """A DiffuPlex predictor file for the loaded model (used from the next conversation)."""
        if self.loaded is None or self.worker is not None:
            self.message_bar.show_message("Load a model, and stop the conversation, to choose a predictor.", "info")
            return
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, "DiffuPlex predictor", "", "Predictor (*.safetensors)")
            if not path:
                return
        self._predictor_loader = PredictorLoader(self.loaded.session, path, self.predictor_signals)
        self.start_button.setEnabled(False)
        self.model_picker.set_controls_enabled(False)
        self._predictor_loader.start()

    def _predictor_done(self) -> bool:
        """The predictor loader has ended: the window's controls come back."""
        self.start_button.setEnabled(self.worker is None)
        self.model_picker.set_controls_enabled(self.worker is None)
        return self.loaded is not None and self.loaded.session is self._predictor_loader.session

    def _on_predictor(self, path: str, capabilities: dict) -> None:
        if not self._predictor_done():
            return
        self.loaded = dataclasses.replace(self.loaded, capabilities=capabilities, predictor=Path(path).name)
        self.panel.controls.adapter_label.setText(Path(path).name)
        self.panel.controls.apply_capabilities(capabilities)

    def _on_muted(self, muted: bool) -> None:
        if self.worker is not None:
            self.worker.set_muted(muted)

    def open_recordings(self) -> None:
        folder = self.settings.recordings_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.message_bar.show_message(f"Cannot create the recordings folder {folder}: {exc.strerror}")
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.copy_recording_path()
            self.message_bar.show_message(f"No file manager opened the folder. It is {folder} "
                                          "(its path is on the clipboard).", "info")

    def copy_recording_path(self) -> None:
        """The last recording's path once there is one, else the recordings folder's."""
        QApplication.clipboard().setText(self._recording_path)

    def _show_recording_path(self, path: Path, what: str) -> None:
        self._recording_path = str(path)
        self.recording_label.setText(f"{what}: {path}")

    def closeEvent(self, event) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker.link.close()
            self.worker.join(timeout=5.0)
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
    window = MainWindow(AppSettings(), device=device)
    reporter.parent_window = window
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
        window.load_model()
    QTimer.singleShot(0, lambda: window.offer_gpu_support(first_run=True))
    try:
        status = app.exec()
        log.info("exiting (status %d)", status)
        return status
    finally:
        reporter.uninstall()
