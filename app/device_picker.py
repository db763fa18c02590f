"""Microphone and speaker pickers (system defaults preselected, refreshable), the mute
switch and the input level meter."""
from __future__ import annotations

from PyQt6.QtCore import pyqtSignal
from PyQt6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QGroupBox, QLabel, QProgressBar, QPushButton

from . import audio_devices
from .app_settings import AppSettings
from .audio_devices import AudioDevice

METER_FLOOR_DB = -60


class DevicePicker(QGroupBox):
    muted_changed = pyqtSignal(bool)

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__("Audio", parent)
        self.settings = settings
        self.microphone = QComboBox()
        self.speaker = QComboBox()
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Look for audio devices again (plugged in since start).")
        self.refresh_button.clicked.connect(lambda: self.refresh(rescan=True))
        self.mute = QCheckBox("Mute microphone")
        self.mute.toggled.connect(self.muted_changed)
        self.meter = QProgressBar()
        self.meter.setRange(METER_FLOOR_DB, 0)
        self.meter.setTextVisible(False)
        self.meter.setMaximumHeight(10)
        self.meter.setValue(METER_FLOOR_DB)
        self.meter.setAccessibleName("Microphone level")
        layout = QGridLayout(self)
        layout.addWidget(QLabel("Microphone"), 0, 0)
        layout.addWidget(self.microphone, 0, 1)
        layout.addWidget(self.refresh_button, 0, 2)
        layout.addWidget(QLabel("Speaker"), 1, 0)
        layout.addWidget(self.speaker, 1, 1)
        layout.addWidget(self.mute, 1, 2)
        layout.addWidget(QLabel("Level"), 2, 0)
        layout.addWidget(self.meter, 2, 1, 1, 2)
        layout.setColumnStretch(1, 1)
        self.microphone.activated.connect(lambda: self._remember("input", self.microphone))
        self.speaker.activated.connect(lambda: self._remember("output", self.speaker))
        self.refresh(rescan=False)

    def refresh(self, rescan: bool) -> None:
        """List devices again; keep the user's choice when it is still there, else the
        system default."""
        if rescan:
            audio_devices.rescan()
        for kind, combo, none_text in (("input", self.microphone, "No microphone found"),
                                       ("output", self.speaker, "No speaker found")):
            devices = audio_devices.list_devices(kind)
            combo.clear()
            for device in devices:
                suffix = " (system default)" if device.is_default else ""
                combo.addItem(f"{device.name}{suffix}", device)
            if not devices:
                combo.addItem(audio_devices.PORTAUDIO_MISSING or none_text, None)
            saved = [i for i, d in enumerate(devices) if d.key == self.settings.device_key(kind)]
            combo.setCurrentIndex(saved[0] if saved else 0)
            combo.setEnabled(bool(devices))

    def selected(self, kind: str) -> AudioDevice | None:
        combo = self.microphone if kind == "input" else self.speaker
        return combo.currentData()

    def set_running(self, running: bool) -> None:
        """Devices are fixed while a conversation runs (a rescan would close its streams)."""
        self.refresh_button.setEnabled(not running)
        for combo in (self.microphone, self.speaker):
            combo.setEnabled(not running and combo.currentData() is not None)
        if not running:
            self.meter.setValue(METER_FLOOR_DB)

    def is_muted(self) -> bool:
        return self.mute.isChecked()

    def set_muted(self, muted: bool) -> None:
        """As if the user ticked the switch (muted_changed is emitted on a change)."""
        self.mute.setChecked(muted)

    def set_level(self, dbfs: float) -> None:
        self.meter.setValue(int(max(METER_FLOOR_DB, min(0.0, dbfs))))

    def _remember(self, kind: str, combo: QComboBox) -> None:
        device = combo.currentData()
        if device is not None:
            self.settings.set_device_key(kind, device.key)
