"""Every setting the app keeps, what a usable value of it is, and what a person calls it; and
the check made once at start: a value that cannot be used (a file edited by hand, one damaged,
or written by another version) is removed, so that its default applies and the next start
has nothing to say, and the window and the log say which settings were reset."""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from PyQt6.QtCore import QByteArray, QSettings

from engine import TOGGLES, WEIGHTS, RuntimeOptions

from .window.plain_words import OPTIONS
from .window.plain_words import TOGGLES as SWITCHES
from .window.theme import THEMES

log = logging.getLogger("duplexcadence")

# Versioned: the first release stored both toggles off, its default then, not a choice.
RUNTIME_GROUP = "runtime.v2"
ECHO_CHOICES = ("echo_cancellation", "noise_suppression", "high_pass")  # what the Audio box offers
SAMPLING = ("text_temperature", "text_top_k", "audio_temperature", "audio_top_k", "seed")
"""The RuntimeOptions fields the Settings dialog sets (stored apart from the panel's switches)."""
SAMPLING_MAX = {float: 100.0, int: 10_000_000}
"""Beyond these a sampling value is no choice anyone made (RuntimeOptions sets no upper limit)."""
FORMAT_KEY = "settings/format"
"""Written at each start: Qt finds a damaged file only when it writes to it."""
GEOMETRY_MAGIC = b"\x01\xd9\xd0\xcb"  # QWidget.saveGeometry's first bytes
TEXT_LIMIT = 4096
NAME_MAX = 255  # bytes in one name of a path, on the usual file systems
ROLE_LIMIT = 100_000
NAMES_SHOWN = 4


def is_bool(value) -> bool:
    return isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false"))


def _text(value, limit: int = TEXT_LIMIT, lines: bool = False) -> bool:
    return isinstance(value, str) and len(value) <= limit and (lines or value.isprintable())


def _number(value, low: float, high: float) -> bool:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and low <= number <= high


def _option(name: str, kind):
    """A RuntimeOptions field, checked by RuntimeOptions itself (and a sampling field's bound)."""
    def check(value) -> bool:
        if kind is bool and not is_bool(value):
            return False
        try:
            typed = (value.lower() == "true" if isinstance(value, str) else value) if kind is bool else kind(value)
            RuntimeOptions(**{name: typed})
        except (TypeError, ValueError):
            return False
        return kind not in SAMPLING_MAX or name == "seed" or typed <= SAMPLING_MAX[kind]
    return check


def parse_presets(text) -> list[list[str]]:
    """The saved personas' JSON -> [name, voice, role] lists; ValueError if it is not that."""
    items = json.loads(text) if isinstance(text, str) else None
    if not isinstance(items, list) or not all(
            isinstance(item, list) and len(item) == 3 and all(isinstance(f, str) for f in item) for item in items):
        raise ValueError("not a list of [name, voice, role] strings")
    return items


def _presets(value) -> bool:
    try:
        parse_presets(value)
    except ValueError:  # json's errors are ValueErrors too
        return False
    return True


def _path(value) -> bool:
    """An absolute path whose every name a file system could hold."""
    return _text(value) and Path(value).is_absolute() and all(len(part.encode()) <= NAME_MAX
                                                              for part in Path(value).parts)


def _folders(value) -> bool:
    items = [value] if isinstance(value, str) else value
    return value is None or (isinstance(items, list) and len(items) <= 100 and all(_path(f) for f in items))


def _folder(value) -> bool:
    return value == "" or _path(value)


def _geometry(value) -> bool:
    return isinstance(value, QByteArray) and bytes(value[:4]) == GEOMETRY_MAGIC


def _one_of(*values):
    return lambda value: value in values


_DEFAULT = RuntimeOptions()
SETTINGS = {
    "model/source": ("the chosen model", _text),
    "model/weights": ("the chosen weights", _one_of("", *WEIGHTS)),
    "model/folders": ("the model folders you picked", _folders),
    "gpu_support/offered": ("the GPU support offer", is_bool),
    "audio/input": ("the chosen microphone", _text),
    "audio/output": ("the chosen speaker", _text),
    "audio/input_label": ("the chosen microphone's name", _text),
    "audio/output_label": ("the chosen speaker's name", _text),
    "audio/speaker_volume": ("the speaker volume", lambda value: _number(value, 0.0, 1.0)),
    "audio/speaker_muted": ("Mute speaker", is_bool),
    "echo/echo_cancellation": ("Echo cancellation", is_bool),
    "echo/noise_suppression": ("Noise suppression", is_bool),
    "echo/high_pass": ("High-pass filter", is_bool),
    **{f"{RUNTIME_GROUP}/{name}": (OPTIONS[name], _option(name, kind))
       for name, kind in (("policy", str), ("tau", float), ("block", int), ("verify", str))},
    **{f"{RUNTIME_GROUP}/{name}": (SWITCHES[name], _option(name, bool)) for name in TOGGLES},
    **{f"sampling/{name}": (name.replace("_", " ").replace("top k", "top-k"),
                            _option(name, type(getattr(_DEFAULT, name)))) for name in SAMPLING},
    "persona/presets": ("the saved personas", _presets),
    "persona/voice": ("the voice", _text),
    "persona/role": ("the role", lambda value: _text(value, ROLE_LIMIT, lines=True)),
    "appearance/theme": ("the theme", _one_of(*THEMES)),
    "window/engine_pane_open": ("whether Engine details is open", is_bool),
    "window/geometry": ("the window's size and place", _geometry),
    "recording/enabled": ("Record", is_bool),
    "recording/folder": ("the recordings folder", _folder),
    "hints/headphones_done": ("the headphones hint", is_bool),
}
"""Each setting's key -> (what a person calls it, whether a stored value is usable)."""


@dataclass(frozen=True)
class SettingsReport:
    """What the start's check did: the keys whose values were removed, and, where Qt could not
    read the file, the copy of it that was kept."""
    file: str
    reset: tuple[str, ...]
    unreadable_copy: str | None = None

    def message(self) -> str:
        """For the window: one or two lines."""
        if self.unreadable_copy is not None:
            text = (f"The settings file could not be read, so settings are back to their defaults; "
                    f"it is kept as {self.unreadable_copy}.")
            return text + (f" Also reset: {_names(self.reset)}." if self.reset else "")
        return f"Settings that could not be used are back to their defaults: {_names(self.reset)}."

    def names(self) -> list[str]:
        return [SETTINGS[key][0] for key in self.reset]


def _names(keys: tuple[str, ...]) -> str:
    names = [SETTINGS[key][0] for key in keys]
    if len(names) > NAMES_SHOWN:
        return ", ".join(names[:NAMES_SHOWN]) + f" and {len(names) - NAMES_SHOWN} more (the log lists them)"
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def repair(q: QSettings) -> SettingsReport | None:
    """Remove every stored value that cannot be used; None when all could be. Logs once."""
    path = Path(q.fileName())
    raw = path.read_bytes() if path.is_file() else None  # (no file: a first start, or the registry)
    q.setValue(FORMAT_KEY, 1)
    q.sync()
    copy = None
    if q.status() == QSettings.Status.FormatError and raw is not None:
        copy = path.with_name(path.name + ".unreadable")
        copy.write_bytes(raw)
    bad = [key for key, (_, usable) in SETTINGS.items() if q.contains(key) and not usable(q.value(key))]
    if not bad and copy is None:
        return None
    values = ", ".join(f"{key}={_shown(q.value(key))}" for key in bad)
    for key in bad:
        q.remove(key)
    q.sync()
    if copy is not None:
        log.warning("settings %s could not be read (kept as %s): defaults from now on%s", path, copy,
                    f"; reset: {values}" if bad else "")
    else:
        log.warning("settings %s: reset to defaults, their values could not be used: %s", path, values)
    return SettingsReport(str(path), tuple(bad), None if copy is None else str(copy))


def _shown(value) -> str:
    text = repr(bytes(value) if isinstance(value, QByteArray) else value)
    return text if len(text) <= 80 else text[:77] + "…"
