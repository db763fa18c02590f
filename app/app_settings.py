"""What the app remembers between runs (QSettings: the platform's usual place)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple

from PyQt6.QtCore import QByteArray, QSettings, QStandardPaths

from engine import TOGGLES, WEIGHTS, RuntimeOptions

from . import settings_repair
from .audio.echo_cancel import EchoSettings
from .settings_repair import ECHO_CHOICES, RUNTIME_GROUP, SAMPLING, SettingsReport, parse_presets
from .window.theme import THEMES

log = logging.getLogger("duplexcadence")
__all__ = ["ECHO_CHOICES", "RUNTIME_GROUP", "SAMPLING", "AppSettings", "PersonaPreset", "SettingsReport"]


class PersonaPreset(NamedTuple):
    """A voice and role prompt saved under a name ("" voice: no voice prompt)."""
    name: str
    voice: str
    role: str


class AppSettings:
    def __init__(self, settings: QSettings | None = None):
        self.q = settings or QSettings("DuplexCadence", "DuplexCadence")

    def repair(self) -> SettingsReport | None:
        """Once, at start: values that cannot be used are removed (their defaults apply) and
        logged; what was reset, or None (app.settings_repair)."""
        return settings_repair.repair(self.q)

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
    def has_model_source(self) -> bool:
        """A model was loaded once (model_source is the user's, not the default)."""
        return self.q.contains("model/source")

    @property
    def model_weights(self) -> str:
        """"" (as the checkpoint holds them), "bf16", "int8" or "int4"."""
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
    def barge_in(self) -> bool:
        """Talking over a model that can be interrupted stops it (app/conversation/barge_in.py)."""
        return self._get("audio/barge_in", True, bool)

    @barge_in.setter
    def barge_in(self, value: bool) -> None:
        self.q.setValue("audio/barge_in", value)

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
        """The policy and toggles the user chose, with the sampling of the Settings dialog; the
        fast path where they chose nothing."""
        default = RuntimeOptions().replace(**self.sampling)
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
        """The panel's choices. The sampling fields are left to `sampling`: the panel holds a copy
        made when it was built, which must not overwrite a later choice in the Settings dialog."""
        for name in ("policy", "tau", "block", "verify"):
            self.q.setValue(f"{RUNTIME_GROUP}/{name}", getattr(options, name))
        for name in TOGGLES:
            self.q.setValue(f"{RUNTIME_GROUP}/{name}", getattr(options, name))

    @property
    def sampling(self) -> dict:
        """The SAMPLING fields of RuntimeOptions as chosen in the Settings dialog. Each stored value
        is checked by RuntimeOptions; one it refuses (a file edited by hand) is its default."""
        default = RuntimeOptions()
        values = {}
        for name in SAMPLING:
            fallback, key = getattr(default, name), f"sampling/{name}"
            try:
                values[name] = getattr(RuntimeOptions(**{name: self._get(key, fallback, type(fallback))}), name)
            except (TypeError, ValueError) as exc:
                log.warning("settings %s: %s = %r is refused (%s); using %r",
                            self.q.fileName(), key, self.q.value(key), exc, fallback)
                values[name] = fallback
        return values

    @sampling.setter
    def sampling(self, values: dict) -> None:
        unknown = set(values) - set(SAMPLING)
        if unknown:
            raise ValueError(f"sampling takes {', '.join(SAMPLING)}; got {', '.join(sorted(unknown))}")
        RuntimeOptions(**values)  # refuses a bad value before anything is stored
        for name, value in values.items():
            self.q.setValue(f"sampling/{name}", value)

    @property
    def persona_presets(self) -> list[PersonaPreset]:
        """Saved voices and roles, in the order they were saved (JSON in one key)."""
        text = self._get("persona/presets", "[]")
        try:
            items = parse_presets(text)
        except ValueError as exc:  # edited by hand (json's errors are ValueErrors too)
            log.warning("settings %s: persona/presets is unreadable (%s); no presets", self.q.fileName(), exc)
            return []
        return [PersonaPreset(*item) for item in items]

    @persona_presets.setter
    def persona_presets(self, presets: list[PersonaPreset]) -> None:
        self.q.setValue("persona/presets", json.dumps([list(PersonaPreset(*p)) for p in presets]))

    @property
    def theme(self) -> str:
        """"system" (the platform's colours), "light" or "dark" (app.window.theme)."""
        value = self._get("appearance/theme", "system")
        return value if value in THEMES else "system"

    @theme.setter
    def theme(self, value: str) -> None:
        if value not in THEMES:
            raise ValueError(f"unknown theme {value!r}; choose one of {', '.join(THEMES)}")
        self.q.setValue("appearance/theme", value)

    @property
    def engine_pane_open(self) -> bool:
        """Whether the window's Engine details pane is open (closed until the user opens it)."""
        return self._get("window/engine_pane_open", False, bool)

    @engine_pane_open.setter
    def engine_pane_open(self, value: bool) -> None:
        self.q.setValue("window/engine_pane_open", bool(value))

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
        return Path(chosen) if chosen else self.default_recordings_dir()

    @recordings_dir.setter
    def recordings_dir(self, folder: Path | str) -> None:
        """"" goes back to the default folder."""
        self.q.setValue("recording/folder", str(folder))

    @staticmethod
    def default_recordings_dir() -> Path:
        data = Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation))
        folder, doubled = data / "DuplexCadence" / "recordings", data / "DuplexCadence" / "DuplexCadence" / "recordings"
        if not folder.exists() and doubled.is_dir() and any(doubled.iterdir()):
            return doubled
        return folder

    @property
    def headphones_hint_done(self) -> bool:
        return self._get("hints/headphones_done", False, bool)

    @headphones_hint_done.setter
    def headphones_hint_done(self, value: bool) -> None:
        self.q.setValue("hints/headphones_done", value)

    def persona(self) -> tuple[str, str]:
        """The voice and role prompt last chosen."""
        return self._get("persona/voice", ""), self._get("persona/role", "")

    def set_persona(self, voice: str, role: str) -> None:
        self.q.setValue("persona/voice", voice)
        self.q.setValue("persona/role", role)

    def geometry(self) -> QByteArray | None:
        value = self.q.value("window/geometry")
        return value if isinstance(value, QByteArray) else None

    def set_geometry(self, geometry: QByteArray) -> None:
        self.q.setValue("window/geometry", geometry)
