"""What the app remembers between runs (QSettings: the platform's usual place)."""
from __future__ import annotations

from pathlib import Path

from PyQt6.QtCore import QByteArray, QSettings, QStandardPaths

from engine import TOGGLES, WEIGHTS, RuntimeOptions

from .echo_cancel import EchoSettings

# Versioned: the first release stored both toggles off, its default then, not a choice.
RUNTIME_GROUP = "runtime.v2"
ECHO_CHOICES = ("echo_cancellation", "noise_suppression", "high_pass")  # what the Audio box offers


class AppSettings:
    def __init__(self, settings: QSettings | None = None):
        self.q = settings or QSettings("DuplexCadence", "DuplexCadence")

    def _get(self, key: str, default, kind=str):
        value = self.q.value(key, default)
        if kind is bool and isinstance(value, str):  # INI files store booleans as text
            return value.lower() == "true"
        return kind(value) if value is not None else default

    @property
    def model_source(self) -> str:
        return self._get("model/source", "demo")

    @model_source.setter
    def model_source(self, value: str) -> None:
        self.q.setValue("model/source", value)

    @property
    def model_weights(self) -> str:
        """"" (as the checkpoint holds them), "bf16" or "int8"."""
        value = self._get("model/weights", "")
        return value if value in WEIGHTS else ""

    @model_weights.setter
    def model_weights(self, value: str) -> None:
        self.q.setValue("model/weights", value)

    @property
    def gpu_support_offered(self) -> bool:
        """The offer to fetch GPU support was answered once; later it is in the Help menu."""
        return self._get("gpu_support/offered", False, bool)

    @gpu_support_offered.setter
    def gpu_support_offered(self, value: bool) -> None:
        self.q.setValue("gpu_support/offered", value)

    @property
    def model_folders(self) -> list[str]:
        """Checkpoint folders the user picked by hand, most recent first."""
        value = self.q.value("model/folders", [])
        return [value] if isinstance(value, str) else list(value or [])

    def remember_folder(self, folder: str) -> None:
        folders = [folder] + [f for f in self.model_folders if f != folder]
        self.q.setValue("model/folders", folders[:8])

    def device_key(self, kind: str) -> str:
        return self._get(f"audio/{kind}", "")

    def set_device_key(self, kind: str, key: str) -> None:
        self.q.setValue(f"audio/{kind}", key)

    def device_label(self, kind: str) -> str:
        """What the remembered device was called, for saying which one is missing."""
        return self._get(f"audio/{kind}_label", "")

    def set_device_label(self, kind: str, label: str) -> None:
        self.q.setValue(f"audio/{kind}_label", label)

    @property
    def speaker_volume(self) -> float:
        """The model's voice gain, 0..1 (1: as the model made it)."""
        try:
            return min(1.0, max(0.0, self._get("audio/speaker_volume", 1.0, float)))
        except ValueError:  # edited by hand
            return 1.0

    @speaker_volume.setter
    def speaker_volume(self, value: float) -> None:
        self.q.setValue("audio/speaker_volume", float(value))

    @property
    def speaker_muted(self) -> bool:
        return self._get("audio/speaker_muted", False, bool)

    @speaker_muted.setter
    def speaker_muted(self, value: bool) -> None:
        self.q.setValue("audio/speaker_muted", value)

    @property
    def echo_settings(self) -> EchoSettings:
        """The microphone path's processing, as chosen in the Audio box. Automatic gain is not
        offered there, so it keeps EchoSettings' default (off) and is not stored."""
        default = EchoSettings()
        return EchoSettings(**{name: self._get(f"echo/{name}", getattr(default, name), bool)
                               for name in ECHO_CHOICES})

    @echo_settings.setter
    def echo_settings(self, value: EchoSettings) -> None:
        for name in ECHO_CHOICES:
            self.q.setValue(f"echo/{name}", getattr(value, name))

    @property
    def runtime_options(self) -> RuntimeOptions:
        """The policy and toggles the user chose; the fast path where they chose nothing."""
        default = RuntimeOptions()
        chosen = {name: self._get(f"{RUNTIME_GROUP}/{name}", getattr(default, name), bool) for name in TOGGLES}
        try:
            return default.replace(policy=self._get(f"{RUNTIME_GROUP}/policy", default.policy),
                                   tau=self._get(f"{RUNTIME_GROUP}/tau", default.tau, float),
                                   block=self._get(f"{RUNTIME_GROUP}/block", default.block, int),
                                   verify=self._get(f"{RUNTIME_GROUP}/verify", default.verify), **chosen)
        except ValueError:  # a settings file edited by hand, or from a newer version
            return default

    @runtime_options.setter
    def runtime_options(self, options: RuntimeOptions) -> None:
        for name in ("policy", "tau", "block", "verify"):
            self.q.setValue(f"{RUNTIME_GROUP}/{name}", getattr(options, name))
        for name in TOGGLES:
            self.q.setValue(f"{RUNTIME_GROUP}/{name}", getattr(options, name))

    @property
    def record(self) -> bool:
        return self._get("recording/enabled", True, bool)

    @record.setter
    def record(self, value: bool) -> None:
        self.q.setValue("recording/enabled", value)

    @property
    def recordings_dir(self) -> Path:
        """The folder the user chose, else `<data>/DuplexCadence/recordings` (e.g.
        ~/.local/share/DuplexCadence/recordings). Qt's app-data folder doubles the name
        (organisation and application are both DuplexCadence): recordings made there by earlier
        versions are still found, as long as that folder is the one that holds some."""
        chosen = self._get("recording/folder", "")
        if chosen:
            return Path(chosen)
        data = Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation))
        folder, doubled = data / "DuplexCadence" / "recordings", data / "DuplexCadence" / "DuplexCadence" / "recordings"
        if not folder.exists() and doubled.is_dir() and any(doubled.iterdir()):
            return doubled
        return folder

    @recordings_dir.setter
    def recordings_dir(self, folder: Path | str) -> None:
        self.q.setValue("recording/folder", str(folder))

    @property
    def headphones_hint_done(self) -> bool:
        return self._get("hints/headphones_done", False, bool)

    @headphones_hint_done.setter
    def headphones_hint_done(self, value: bool) -> None:
        self.q.setValue("hints/headphones_done", value)

    def persona(self) -> tuple[str, str]:
        """PersonaPlex voice and role prompt."""
        return self._get("persona/voice", ""), self._get("persona/role", "")

    def set_persona(self, voice: str, role: str) -> None:
        self.q.setValue("persona/voice", voice)
        self.q.setValue("persona/role", role)

    def geometry(self) -> QByteArray | None:
        value = self.q.value("window/geometry")
        return value if isinstance(value, QByteArray) else None

    def set_geometry(self, geometry: QByteArray) -> None:
        self.q.setValue("window/geometry", geometry)
