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

from . import audio_devices, sound_server
from .app_settings import AppSettings
from .audio_devices import AudioDevice
from .echo_cancel import EchoSettings

METER_FLOOR_DB = -60
KINDS = ("input", "output")
WHAT = {"input": "microphone", "output": "speaker"}
NONE_FOUND = {"input": "No microphone found", "output": "No speaker found"}
# Plugging a headset sends a burst of events (its sink, its source, a new default): one
# refresh after the burst, not one per event.
EVENT_SETTLE_MS = 150


class DevicePicker(QGroupBox):
    muted_changed = pyqtSignal(bool)          # the microphone's mute
    speaker_muted_changed = pyqtSignal(bool)
    volume_changed = pyqtSignal(float)        # the speaker's gain, 0..1
    echo_changed = pyqtSignal(object)         # EchoSettings
    device_lost = pyqtSignal(str)             # a running conversation's device went away: what to tell
    notice = pyqtSignal(str)                  # a remembered device is missing: what to tell

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__("Audio", parent)
        self.settings = settings
        self._devices: dict[str, list[AudioDevice]] = {}
        self._running = False
        self._in_use: dict[str, AudioDevice | None] = {}
        self._report_loss = False
        self._told: set[str] = set()          # keys of missing devices the user was told about
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
        self.echo_state.setToolTip("What echo cancellation is doing. Converging: still learning how sound "
                                   "travels from your speaker to your microphone (the first seconds). "
                                   "Active: removing the echo. Off: not running.")
        self.noise_suppression = QCheckBox("Noise suppression")
        self.noise_suppression.setChecked(echo.noise_suppression)
        self.noise_suppression.setToolTip("Turns down steady background noise (fans, hum) before the model "
                                          "hears you. Can also dull quiet speech.")
        self.high_pass = QCheckBox("High-pass filter")
        self.high_pass.setChecked(echo.high_pass)
        self.high_pass.setToolTip("Removes low rumble (desk knocks, traffic, air conditioning) that lies "
                                  "below the voice.")

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
        layout.setColumnStretch(1, 1)

    def _connect(self) -> None:
        self.refresh_button.clicked.connect(lambda: self.refresh(rescan=True))
        self.mute.toggled.connect(self.muted_changed)
        self.speaker_mute.toggled.connect(self._on_speaker_muted)
        self.volume.valueChanged.connect(self._on_volume)
        for box in (self.echo_cancellation, self.noise_suppression, self.high_pass):
            box.toggled.connect(self._on_echo)
        self.microphone.activated.connect(lambda: self._remember("input"))
        self.speaker.activated.connect(lambda: self._remember("output"))

    # --- devices ------------------------------------------------------------------------
    def refresh(self, rescan: bool = False) -> None:
        """List devices again; keep the user's choice when it is still there, else the system
        default. `rescan` re-initialises PortAudio (for devices outside the sound server); it
        is skipped while a conversation runs, as it would close the conversation's streams."""
        if rescan and not self._running:
            audio_devices.rescan()
            self._devices.clear()  # PortAudio's indices may have moved: rebuild the items
        for kind in KINDS:
            self._show(kind, audio_devices.list_devices(kind))

    def selected(self, kind: str) -> AudioDevice | None:
        return self._combo(kind).currentData()

    def set_running(self, running: bool, uses_devices: bool = True) -> None:
        """Devices are fixed while a conversation runs (`uses_devices`: through the selected
        devices rather than from a file); the lists still follow the sound server, so that a
        device unplugged meanwhile is reported."""
        self._running = running
        self._in_use = {kind: self.selected(kind) for kind in KINDS} if running else {}
        self._report_loss = running and uses_devices
        self.refresh_button.setEnabled(not running)
        if not running:
            self.meter.setValue(METER_FLOOR_DB)
            self.output_meter.setValue(METER_FLOOR_DB)
            self.refresh()  # the remembered choices again, not those the conversation held on to
        for kind in KINDS:
            combo = self._combo(kind)
            combo.setEnabled(not running and combo.currentData() is not None)

    def _combo(self, kind: str) -> QComboBox:
        return self.microphone if kind == "input" else self.speaker

    def _on_server_change(self) -> None:
        self.refresh(rescan=False)

    def _show(self, kind: str, devices: list[AudioDevice]) -> None:
        combo = self._combo(kind)
        if devices != self._devices.get(kind):  # unchanged lists are left alone (an open popup stays)
            self._devices[kind] = devices
            combo.clear()
            for device in devices:
                combo.addItem(_item_text(device, devices), device)
                combo.setItemData(combo.count() - 1, device.server_name or device.key,
                                  Qt.ItemDataRole.ToolTipRole)
            if not devices:
                combo.addItem(audio_devices.PORTAUDIO_MISSING or NONE_FOUND[kind], None)
        combo.setCurrentIndex(self._choice(kind, devices))
        combo.setEnabled(bool(devices) and not self._running)

    def _choice(self, kind: str, devices: list[AudioDevice]) -> int:
        """Which item to select: the device in use while running, else the remembered one;
        the system default when that is gone (saying so once)."""
        default = next((i for i, d in enumerate(devices) if d.is_default), 0)
        if self._running:
            in_use = self._in_use.get(kind)
            found = None if in_use is None else _find(devices, in_use.key)
            # The sound server moves a stream whose device went away to the default by itself;
            # a list that no longer comes from the server means the server went away (and the
            # stream with it, which the conversation reports).
            if (found is None and self._report_loss and in_use is not None and in_use.server_name is not None
                    and audio_devices.server_listed(devices)):
                # The default from now on, even should the device come back: the stream stays
                # where the server moved it.
                self._in_use[kind] = None
                self._told.add(in_use.key)  # (no "not connected" notice for it after this)
                self.device_lost.emit(
                    f"The {WHAT[kind]} “{in_use.name}” was unplugged: the sound server moved the "
                    "conversation to the default; pick another in Audio.")
            return default if found is None else found
        key = self.settings.device_key(kind)
        found = _find(devices, key)
        if found is not None:
            self._told.discard(key)  # back: a later absence is news again
            return found
        if key and key not in self._told and _same_family(devices, key):
            self._told.add(key)
            label = self.settings.device_label(kind) or key
            self._announce(f"The {WHAT[kind]} “{label}” is not connected: using the system default "
                           "until it is back.")
        return default

    def _announce(self, text: str) -> None:
        # The first listing runs in __init__, before anyone could connect to `notice`.
        self._pending_notices.append(text)
        QTimer.singleShot(0, self._flush_notices)

    def _flush_notices(self) -> None:
        notices, self._pending_notices = self._pending_notices, []
        for text in notices:
            self.notice.emit(text)

    def _remember(self, kind: str) -> None:
        device = self.selected(kind)
        if device is not None:
            self.settings.set_device_key(kind, device.key)
            self.settings.set_device_label(kind, device.name)

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


def _find(devices: list[AudioDevice], key: str) -> int | None:
    return next((i for i, d in enumerate(devices) if d.key == key), None)


def _same_family(devices: list[AudioDevice], key: str) -> bool:
    """Whether `key` names a device of the kind listed now (a sound server's, or a PortAudio
    host API's): only then is its absence news. One remembered before the app listed the
    server's devices ("ALSA: default"), or Windows' MME before WASAPI was preferred, just
    is not comparable."""
    family = key.split(": ", 1)[0]
    return any(d.key.split(": ", 1)[0] == family for d in devices)


def _item_text(device: AudioDevice, devices: list[AudioDevice]) -> str:
    """The device's name; its server name or host API beside it where two share a name (two
    "Null Output" sinks, the same card under two host APIs)."""
    text = device.name
    if sum(d.name == device.name for d in devices) > 1:
        text += f" — {device.server_name or device.host_api}"
    return text + (" (system default)" if device.is_default else "")


def _small(text: str) -> QLabel:
    """A meter's caption, quieter than the row labels above it."""
    label = QLabel(text)
    label.setEnabled(False)  # drawn in the palette's muted colour
    return label
