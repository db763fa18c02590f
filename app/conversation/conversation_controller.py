"""One conversation at a time: starting it (loading the chosen model first when needed),
stopping it, muting, runtime switches reaching the engine thread, and each frame it reports
shown in the conversation view, the cadence panel and the level meter. Start is enabled while
a model is loaded (the one loaded, whichever the picker shows) and nothing loads: a click then
always means a conversation, at once (the picker's Load button is where loading, with its
progress, is)."""
from __future__ import annotations

import dataclasses

from PyQt6.QtCore import QObject, pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QPushButton, QWidget

from engine import RuntimeOptions

from ..app_settings import AppSettings
from ..audio.audio_io import AudioConfig, AudioDeviceError, AudioLink
from ..audio.device_picker import DevicePicker
from ..audio.echo_cancel import HEARD_DB
from ..audio.file_feed import FileFeed
from ..models.model_controller import ModelController
from ..models.model_loader import LoadedModel
from ..models.model_picker import ModelPicker
from ..window.cadence_panel import CadencePanel
from ..window.message_bar import MessageBar
from .conversation_signals import ConversationSignals
from .conversation_view import ConversationView
from .engine_thread import ConversationEnd, ConversationWorker, FrameReport
from .recorder import ConversationRecorder


class ConversationController(QObject):
    status = pyqtSignal(str)  # for the status bar; "" clears it
    recording_shown = pyqtSignal(object, str)  # a recording's Path, and what it is ("Recording to", ...)
    _link_notice = pyqtSignal(str, str)  # the audio link's (text, kind), from the engine thread

    def __init__(self, models: ModelController, settings: AppSettings, audio_config: AudioConfig, *,
                 start_button: QPushButton, stop_button: QPushButton, record_box: QCheckBox,
                 view: ConversationView, panel: CadencePanel, model_picker: ModelPicker,
                 device_picker: DevicePicker, message_bar: MessageBar, parent: QWidget):
        super().__init__(parent)
        self._models, self.settings, self.audio_config = models, settings, audio_config
        self._start_button, self._stop_button, self._record_box = start_button, stop_button, record_box
        self._view, self._panel = view, panel
        self._model_picker, self._device_picker, self._message_bar = model_picker, device_picker, message_bar
        self.worker: ConversationWorker | None = None
        self.last_end: ConversationEnd | None = None
        # A start asked for before its model was loaded: it goes on once the model is.
        self._start_when_loaded = False
        self._pending_feed: FileFeed | None = None
        self.signals = ConversationSignals()
        self.signals.started.connect(lambda: self.status.emit("Conversation running."))
        self.signals.frame.connect(self._show_frame)
        self.signals.notice.connect(self.status)
        self.signals.failed.connect(message_bar.show_message)
        self.signals.warning.connect(lambda text: message_bar.show_message(text, "warning"))
        self.signals.finished.connect(self._on_finished)
        self._busy = False
        models.ready.connect(self._on_model_ready)
        models.failed.connect(self._drop_pending_start)
        models.busy_changed.connect(self._on_busy)
        model_picker.choice_changed.connect(self._update_start)
        start_button.clicked.connect(lambda: self.start())
        stop_button.clicked.connect(self.stop)
        panel.options_changed.connect(self._on_options)
        device_picker.muted_changed.connect(self._on_muted)
        device_picker.barge_in_changed.connect(lambda on: self.worker is not None and self.worker.set_barge_in(on))
        device_picker.volume_changed.connect(self._on_speaker_gain)
        device_picker.speaker_muted_changed.connect(self._on_speaker_gain)
        device_picker.echo_changed.connect(self._on_echo)
        device_picker.notice.connect(lambda text: self._message_bar.show_message(text, "info"))
        device_picker.device_lost.connect(lambda text: self._message_bar.show_message(text, "warning"))
        device_picker.device_chosen.connect(self._on_device_chosen)
        self._link_notice.connect(self._show_link_notice)
        self._update_start()

    @property
    def running(self) -> bool:
        return self.worker is not None

    def start(self, feed: FileFeed | None = None) -> None:
        """Talk through the chosen devices, or through `feed` (e.g. a FileFeed)."""
        if self.worker is not None:
            return
        loaded = self._models.loaded  # the one loaded, whichever the picker shows now
        if loaded is None:
            self._start_when_loaded, self._pending_feed = True, feed
            self._models.load()
            return
        feed, self._pending_feed = feed or self._pending_feed, None
        self._message_bar.hide()
        audio_config = self.audio_config.for_step(loaded.step_s)
        link = feed or self._open_audio(audio_config)
        if link is None:
            return
        persona = self._persona(loaded)
        options = self._panel.options()
        try:
            recorder = self._new_recorder(loaded, options, feed is not None)
        except OSError as exc:
            link.close()
            self._message_bar.show_message(f"Cannot write the recording: {exc}")
            return
        # Only the devices' microphone queue is capped: a file feeds the engine as it asks.
        self._panel.reset(audio_config.max_input_backlog_s if feed is None else None, loaded.session.tally(),
                          loaded.session.stage_words, loaded.step_s)
        if recorder is not None:
            self.recording_shown.emit(recorder.wav_path, "Recording to")
        self._view.begin(f"{loaded.name} · {link.description}", recording=recorder is not None)
        self.worker = ConversationWorker(loaded.session, link, recorder, persona, self.signals)
        self.worker.set_options(options)  # before the thread starts: later switches come after it
        self.worker.set_muted(self._device_picker.is_muted())
        self.worker.set_barge_in(self._device_picker.barge_in.isChecked())
        self.worker.set_speaker_gain(self._speaker_gain())
        self.worker.start()
        self._set_running(True, uses_devices=feed is None)

    def stop(self) -> None:
        """Silence at once; the engine thread finishes its current frame and exits."""
        if self.worker is None:
            return
        self.worker.stop()
        self._stop_button.setEnabled(False)
        self.status.emit("Stopping…")

    def stop_and_wait(self, timeout: float = 5.0) -> None:
        """Before the app quits: the engine thread ends, and with it the recording."""
        if self.worker is not None:
            self.worker.stop()
            self.worker.join(timeout=timeout)

    def _open_audio(self, config: AudioConfig) -> AudioLink | None:
        microphone = self._device_picker.selected("input")
        speaker = self._device_picker.selected("output")
        if microphone is None or speaker is None:
            missing = "microphone" if microphone is None else "speaker"
            self._message_bar.show_message(
                f"No {missing} found. Connect one: it shows in the Audio box (press Refresh if it does not).")
            return None
        try:
            return AudioLink(microphone, speaker, config, echo=self._device_picker.echo_settings(),
                             notify=self._link_notice.emit)
        except AudioDeviceError as exc:
            self._message_bar.show_message(str(exc))
            return None

    def _persona(self, loaded: LoadedModel) -> tuple[str | None, str] | None:
        """The (voice, role) chosen now (and remembered) for a model that takes a role; None for others."""
        if not loaded.takes_role:
            return None
        voice, role = self._model_picker.persona()
        self._model_picker.remember_persona()
        return voice, role or loaded.default_role

    def _new_recorder(self, loaded: LoadedModel, options: RuntimeOptions, from_file: bool
                      ) -> ConversationRecorder | None:
        if not self._record_box.isChecked():
            return None
        processing = None if from_file else dataclasses.asdict(self._device_picker.echo_settings())
        return ConversationRecorder(self.settings.recordings_dir, loaded.name, dataclasses.asdict(options), processing)

    def _show_frame(self, report: FrameReport) -> None:
        self._view.add_frame(report.index, "", report.output.pcm)
        for index, piece in report.heard:  # the words whose speech began playing: what the person heard
            self._view.add_words(index, piece)
        self._panel.add_frame(report)
        self._device_picker.set_level(report.level_dbfs)
        self._device_picker.set_output_level(report.output_dbfs)
        if report.echo is not None:
            self._device_picker.set_echo_state(_echo_text(report.echo))

    def _on_finished(self, end: ConversationEnd) -> None:
        self.last_end = end
        if self.worker is not None:
            self.worker.join(timeout=1.0)
        self.worker = None
        self._set_running(False)
        self._view.finish()
        if end.recording is not None:
            self.status.emit(f"Recording saved: {end.recording}")
            self.recording_shown.emit(end.recording, "Last recording")
        else:
            self.status.emit("")

    def _set_running(self, running: bool, uses_devices: bool = True) -> None:
        self._models.in_use = running
        self._update_start()
        self._stop_button.setEnabled(running)
        self._record_box.setEnabled(not running)
        self._model_picker.set_running(running)
        self._device_picker.set_running(running, uses_devices)

    def _on_busy(self, busy: bool) -> None:
        self._busy = busy
        self._update_start()

    def _update_start(self) -> None:
        if self.running:
            ready, why = False, "A conversation is running."
        elif self._busy:
            ready, why = False, "Wait for the model (or its predictor) to finish loading."
        elif self._models.loaded is None:
            ready, why = False, "Load a model first (Load, in the Model box): Start is ready once it is."
        else:
            ready, why = True, f"Talk with {self._models.loaded.name}, the model loaded."
        self._start_button.setEnabled(ready)
        self._start_button.setToolTip(why)

    def _on_model_ready(self, loaded: LoadedModel) -> None:
        # Only a model that answers once a second is interrupted; the switch says so for the others.
        self._device_picker.barge_in.setEnabled(loaded.interruptible)
        if self._start_when_loaded:
            self._start_when_loaded = False
            self.start()

    def _drop_pending_start(self, _source: str, _message: str) -> None:
        self._start_when_loaded, self._pending_feed = False, None

    def _on_options(self, options: RuntimeOptions) -> None:
        if self.worker is not None:
            self.worker.set_options(options)

    def _on_muted(self, muted: bool) -> None:
        if self.worker is not None:
            self.worker.set_muted(muted)

    def _speaker_gain(self) -> float:
        return 0.0 if self._device_picker.is_speaker_muted() else self.settings.speaker_volume

    def _on_speaker_gain(self, *_) -> None:
        if self.worker is not None:
            self.worker.set_speaker_gain(self._speaker_gain())

    def _on_echo(self, settings) -> None:
        if self.worker is not None:
            self.worker.set_echo(settings)

    def _on_device_chosen(self, kind: str, device) -> None:
        """Mid-conversation: the conversation moves to `device` (None: the microphone is gone,
        silence), as the engine thread gets to it; a file feed has no devices to move."""
        link = self.worker.link if self.worker is not None else None
        if isinstance(link, AudioLink):
            link.use_device(kind, device)

    def _show_link_notice(self, text: str, kind: str) -> None:
        if kind == "status":
            self.status.emit(text)
        else:
            self._message_bar.show_message(text, kind)


def _echo_text(echo) -> str:
    """The Audio box's echo line: the state in words (short: a longer line would widen the
    Audio box, and the window), and, once learned, how much echo it removes."""
    if echo.state == "off":
        return "off"
    if echo.state == "converging":  # it learns from the model's own voice
        return "learning the room…" if echo.voice_s > 0 else "learns the room when the model speaks"
    heard = echo.attenuation_db is not None and echo.attenuation_db >= HEARD_DB
    return f"learned: {echo.attenuation_db:.0f} dB of echo removed" if heard else "learned: no echo heard"
