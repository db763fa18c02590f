"""The Audio box: microphone and speaker pickers (system defaults preselected, following the
sound server's plugging and unplugging), mute switches, the speaker volume, level meters for
both voices, and the microphone's processing switches (echo cancellation and its friends)."""
from __future__ import annotations

import weakref

from PyQt6.QtCore import QObject, Qt, QTimer, pyqtSignal
from PyQt6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSlider,
)

from ..app_settings import AppSettings
from . import audio_devices, sound_server
from .audio_devices import AudioDevice
from .device_choices import DeviceChoices, item_text, lost_text
from .echo_cancel import EchoSettings

METER_FLOOR_DB = -60
KINDS = ("input", "output")
NONE_FOUND = {"input": "No microphone found", "output": "No speaker found"}
# Plugging a headset sends a burst of events (its sink, its source, a new default): one
# refresh after the burst, not one per event.
EVENT_SETTLE_MS = 150


class DevicePicker(QGroupBox):
    muted_changed = pyqtSignal(bool)          # the microphone's mute
    speaker_muted_changed = pyqtSignal(bool)
    barge_in_changed = pyqtSignal(bool)       # talking over the model stops it
    volume_changed = pyqtSignal(float)        # the speaker's gain, 0..1
    echo_changed = pyqtSignal(object)         # EchoSettings
    device_lost = pyqtSignal(str)             # a running conversation's device went away: what to tell
    device_chosen = pyqtSignal(str, object)   # mid-conversation: (kind, device) to move to; None: silence
    notice = pyqtSignal(str)                  # a remembered device is missing, or back: what to tell

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__("Audio", parent)
        self.settings = settings
        self._shown: dict[str, tuple] = {}  # per list: the devices listed, and an unplugged one in use
        self._running = False
        self._choices = DeviceChoices(settings)
        self._pending_notices: list[str] = []
        self._build_widgets()
        self._build_layout()
        self._connect()
        self.refresh(rescan=False)
        # The watch's thread only emits, through a relay it keeps alive (a signal of this widget
        # could be emitted after the widget is gone); the lists are rebuilt on the GUI thread.
        self._settle = QTimer(self, singleShot=True, interval=EVENT_SETTLE_MS, timeout=self._on_server_change)
        self._relay = relay = _Relay()
        relay.changed.connect(self._settle.start)
        self._watch = watch = sound_server.ServerWatch(lambda: relay.changed.emit())
        # Whichever goes first, the Qt widget (its parent closed) or the Python object: the
        # watch stops (the callables capture the watch, not the widget).
        self.destroyed.connect(lambda *_: watch.stop())
        weakref.finalize(self, watch.stop)
        watch.start()

    # --- widgets ------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.microphone = QComboBox()
        self.speaker = QComboBox()
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Look for audio devices again. Those of the sound server show up by "
                                       "themselves; this finds others plugged in since the app started.")
        self.mute = QCheckBox("Mute microphone")
        self.speaker_mute = QCheckBox("Mute speaker")
        self.speaker_mute.setToolTip("Silence the model's voice on the speaker; the conversation goes on.")
        self.speaker_mute.setChecked(self.settings.speaker_muted)
        self.volume = QSlider(Qt.Orientation.Horizontal)
        self.volume.setRange(0, 100)
        self.volume.setValue(round(self.settings.speaker_volume * 100))
        self.volume.setMinimumWidth(70)
        self.volume.setAccessibleName("Speaker volume")
        self.volume.setToolTip("How loud the model's voice plays (100 %: as the model made it).")
        self.volume_label = QLabel()
        self.volume_label.setMinimumWidth(self.volume_label.fontMetrics().horizontalAdvance("100 %"))
        self._show_volume(self.volume.value())
        self.meter = self._new_meter("Microphone level", "How loud the microphone hears you.")
        self.output_meter = self._new_meter("Model voice level", "How loud the model's voice is.")
        echo = self.settings.echo_settings
        self.echo_cancellation = QCheckBox("Echo cancellation")
        self.echo_cancellation.setChecked(echo.echo_cancellation)
        self.echo_cancellation.setToolTip("Lets you talk without headphones: takes the model's own voice, as "
                                          "the speaker plays it, out of what the microphone hears.")
        self.echo_state = QLabel()
        self.echo_state.setWordWrap(True)  # a long state wraps rather than widening the Audio box
        self.echo_state.setToolTip("What echo cancellation is doing. Learning the room (converging): how sound "
                                   "travels from your speaker to your microphone, from the model's first "
                                   "seconds of speech. Learned: how much echo it removes, or that none was "
                                   "heard (headphones). Off: not running.")
        self.noise_suppression = QCheckBox("Noise suppression")
        self.noise_suppression.setChecked(echo.noise_suppression)
        self.noise_suppression.setToolTip("Turns down steady background noise (fans, hum) before the model "
                                          "hears you. Can also dull quiet speech.")
        self.high_pass = QCheckBox("High-pass filter")
        self.high_pass.setChecked(echo.high_pass)
        self.high_pass.setToolTip("Removes low rumble (desk knocks, traffic, air conditioning) that lies "
                                  "below the voice.")
        self.barge_in = QCheckBox("Interrupt by talking")
        self.barge_in.setChecked(self.settings.barge_in)
        self.barge_in.setToolTip("When you talk over the model for a moment, it stops and listens: a model "
                                 "that answers once a second (greyed out for one that hears you every 80 ms, "
                                 "which stops by itself). Turn it off in a room where others talk.")

    def _new_meter(self, name: str, tip: str) -> QProgressBar:
        meter = QProgressBar()
        meter.setRange(METER_FLOOR_DB, 0)
        meter.setTextVisible(False)
        meter.setMaximumHeight(10)
        meter.setValue(METER_FLOOR_DB)
        meter.setAccessibleName(name)
        meter.setToolTip(tip)
        return meter

    def _build_layout(self) -> None:
        # Each meter sits under the device it measures; the switches share one row.
        layout = QGridLayout(self)
        layout.addWidget(QLabel("Microphone"), 0, 0)
        layout.addWidget(self.microphone, 0, 1)
        layout.addWidget(self.mute, 0, 2)
        layout.addWidget(self.refresh_button, 0, 3)
        layout.addWidget(_small("level"), 1, 0)
        layout.addWidget(self.meter, 1, 1)
        layout.addWidget(QLabel("Speaker"), 2, 0)
        layout.addWidget(self.speaker, 2, 1)
        layout.addWidget(self.speaker_mute, 2, 2)
        volume = QHBoxLayout()
        volume.addWidget(self.volume, 1)
        volume.addWidget(self.volume_label)
        layout.addLayout(volume, 2, 3)
        layout.addWidget(_small("level"), 3, 0)
        layout.addWidget(self.output_meter, 3, 1)
        switches = QHBoxLayout()
        for widget in (self.echo_cancellation, self.echo_state, self.noise_suppression, self.high_pass):
            switches.addWidget(widget)
        switches.addStretch(1)
        layout.addLayout(switches, 4, 0, 1, 4)
        layout.addWidget(self.barge_in, 5, 0, 1, 4)
        layout.setColumnStretch(1, 1)

    def _connect(self) -> None:
        self.refresh_button.clicked.connect(lambda: self.refresh(rescan=True))
        self.mute.toggled.connect(self.muted_changed)
        self.speaker_mute.toggled.connect(self._on_speaker_muted)
        self.barge_in.toggled.connect(self._on_barge_in)
        self.volume.valueChanged.connect(self._on_volume)
        for box in (self.echo_cancellation, self.noise_suppression, self.high_pass):
            box.toggled.connect(self._on_echo)
        self.microphone.activated.connect(lambda: self._on_chosen("input"))
        self.speaker.activated.connect(lambda: self._on_chosen("output"))

    # --- devices ------------------------------------------------------------------------
    def refresh(self, rescan: bool = False) -> None:
        """List devices again; keep the user's choice when it is still there, else the system
        default. `rescan` re-initialises PortAudio (for devices outside the sound server); it
        is skipped while a conversation runs, as it would close the conversation's streams."""
        if rescan and not self._running:
            audio_devices.rescan()
            self._shown.clear()  # PortAudio's indices may have moved: rebuild the items
        for kind in KINDS:
            self._show(kind, audio_devices.list_devices(kind))

    def selected(self, kind: str) -> AudioDevice | None:
        return self._combo(kind).currentData()

    def set_running(self, running: bool, uses_devices: bool = True) -> None:
        """While a conversation runs through the selected devices (`uses_devices`, rather than
        from a file), the lists follow them: another device picked, the one in use unplugged
        or back, each is emitted as `device_chosen` (and the loss as `device_lost`). Refresh
        waits: re-initialising PortAudio would close the conversation's streams."""
        self._running = running
        self._choices.follow({kind: self.selected(kind) for kind in KINDS} if running and uses_devices else None)
        self.refresh_button.setEnabled(not running)
        if not running:
            self.meter.setValue(METER_FLOOR_DB)
            self.output_meter.setValue(METER_FLOOR_DB)
        self.refresh()  # the remembered choices again, not those the conversation held on to

    def _combo(self, kind: str) -> QComboBox:
        return self.microphone if kind == "input" else self.speaker

    def _on_server_change(self) -> None:
        self.refresh(rescan=False)

    def _show(self, kind: str, devices: list[AudioDevice]) -> None:
        combo = self._combo(kind)
        index = self._choices.choose(kind, devices)
        lost = self._choices.lost.get(kind)
        if (devices, lost) != self._shown.get(kind):  # unchanged lists are left alone (an open popup stays)
            self._shown[kind] = (devices, lost)
            combo.clear()
            for device in devices:
                combo.addItem(item_text(device, devices), device)
                combo.setItemData(combo.count() - 1, device.server_name or device.key,
                                  Qt.ItemDataRole.ToolTipRole)
            if lost is not None:
                combo.addItem(lost_text(lost), lost)
            elif not devices:
                combo.addItem(audio_devices.PORTAUDIO_MISSING or NONE_FOUND[kind], None)
        combo.setCurrentIndex(index)
        combo.setEnabled(bool(devices) or lost is not None)
        self._emit(self._choices.take_events())

    def _on_chosen(self, kind: str) -> None:
        self._choices.chosen(kind, self.selected(kind))
        self.refresh()  # an unplugged device's item goes once another is picked
        self._emit(self._choices.take_events())

    def _emit(self, events: list[tuple[str, object]]) -> None:
        for what, value in events:
            if what == "notice":
                self._announce(value)
            elif what == "lost":
                self.device_lost.emit(value)
            elif what == "back":
                self.notice.emit(value)
            else:
                self.device_chosen.emit(*value)

    def _announce(self, text: str) -> None:
        # The first listing runs in __init__, before anyone could connect to `notice`.
        self._pending_notices.append(text)
        QTimer.singleShot(0, self._flush_notices)

    def _flush_notices(self) -> None:
        notices, self._pending_notices = self._pending_notices, []
        for text in notices:
            self.notice.emit(text)

    # --- switches and meters --------------------------------------------------------------
    def is_muted(self) -> bool:
        return self.mute.isChecked()

    def set_muted(self, muted: bool) -> None:
        """As if the user ticked the switch (muted_changed is emitted on a change)."""
        self.mute.setChecked(muted)

    def is_speaker_muted(self) -> bool:
        return self.speaker_mute.isChecked()

    def set_speaker_muted(self, muted: bool) -> None:
        """As if the user ticked the switch (speaker_muted_changed is emitted on a change)."""
        self.speaker_mute.setChecked(muted)

    def speaker_volume(self) -> float:
        """The speaker's gain, 0..1."""
        return self.volume.value() / 100

    def echo_settings(self) -> EchoSettings:
        return EchoSettings(echo_cancellation=self.echo_cancellation.isChecked(),
                            noise_suppression=self.noise_suppression.isChecked(),
                            high_pass=self.high_pass.isChecked())

    def set_echo_state(self, text: str) -> None:
        """What echo cancellation is doing ("converging", "active", "off"), shown beside its switch."""
        self.echo_state.setText(text)

    def set_level(self, dbfs: float) -> None:
        self.meter.setValue(_meter_value(dbfs))

    def set_output_level(self, dbfs: float) -> None:
        self.output_meter.setValue(_meter_value(dbfs))

    def _on_barge_in(self, on: bool) -> None:
        self.settings.barge_in = on
        self.barge_in_changed.emit(on)

    def _on_speaker_muted(self, muted: bool) -> None:
        self.settings.speaker_muted = muted
        self.speaker_muted_changed.emit(muted)

    def _on_volume(self, percent: int) -> None:
        self._show_volume(percent)
        self.settings.speaker_volume = percent / 100
        self.volume_changed.emit(percent / 100)

    def _show_volume(self, percent: int) -> None:
        self.volume_label.setText(f"{percent} %")

    def _on_echo(self) -> None:
        settings = self.echo_settings()
        self.settings.echo_settings = settings
        self.echo_changed.emit(settings)


class _Relay(QObject):
    changed = pyqtSignal()


def _meter_value(dbfs: float) -> int:
    return int(max(METER_FLOOR_DB, min(0.0, dbfs)))


def _small(text: str) -> QLabel:
    """A meter's caption, quieter than the row labels above it."""
    label = QLabel(text)
    label.setEnabled(False)  # drawn in the palette's muted colour
    return label
