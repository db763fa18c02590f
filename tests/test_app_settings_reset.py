"""A settings file that is damaged, or holds values no version of the app wrote: the window
starts with the defaults for what it could not use and says once, in a message bar and the
log, which settings those were; the next start has nothing to say."""
import logging
import random

import pytest
from PyQt6.QtCore import QSettings

from app.app_settings import AppSettings
from app.window.main_window import MainWindow
from tests.app_helpers import keep_torch_threads  # noqa: F401

# One value for every key that no choice in the app could have stored: the wrong type, out of
# range, unknown names, too long, broken JSON. Written as raw INI text.
ABSURD = {
    "model/source": "a, b, c",  # an unquoted list
    "model/weights": "int3",
    "model/folders": "/home/" + "x" * 300,  # no file system holds a name that long
    "gpu_support/offered": "maybe",
    "audio/input": "y" * 5000,
    "audio/output": "left, right",
    "audio/input_label": "z" * 5000,
    "audio/output_label": "one, two",
    "audio/speaker_volume": "7.5",
    "audio/speaker_muted": "sometimes",
    "echo/echo_cancellation": "2",
    "echo/noise_suppression": "yes please",
    "echo/high_pass": "-1",
    "runtime.v2/policy": "fastest",
    "runtime.v2/tau": "1.5",
    "runtime.v2/block": "999",
    "runtime.v2/verify": "always",
    "runtime.v2/graph_replay": "on",
    "runtime.v2/demand_sized_state": "3",
    "sampling/text_temperature": "nan",
    "sampling/text_top_k": "-3",
    "sampling/audio_temperature": "1e400",
    "sampling/audio_top_k": "12.5",
    "sampling/seed": "-1",
    "persona/presets": "{not json",
    "persona/voice": "v" * 5000,
    "persona/role": "r" * 100_001,
    "appearance/theme": "neon",
    "window/engine_pane_open": "wide",
    "window/geometry": "@ByteArray(not a geometry)",
    "recording/enabled": "often",
    "recording/folder": "relative/recordings",
    "hints/headphones_done": "perhaps",
}
# And one a person could have chosen for each of half of them (the other half stays absurd).
USABLE = {
    "model/source": "demo", "model/weights": "int8", "audio/speaker_volume": "0.25",
    "echo/echo_cancellation": "false", "runtime.v2/policy": "listen", "runtime.v2/tau": "0.75",
    "runtime.v2/block": "8", "sampling/text_temperature": "0.9", "sampling/seed": "42",
    "appearance/theme": "dark", "recording/enabled": "false", "hints/headphones_done": "true",
    "persona/presets": '"[[\\"calm\\", \\"\\", \\"Be calm.\\"]]"', "window/engine_pane_open": "true",
}


@pytest.fixture(autouse=True)
def no_user_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the default recordings folder


def _ini(path, values: dict[str, str]) -> None:
    sections: dict[str, list[str]] = {}
    for key, value in values.items():
        group, name = key.split("/")
        sections.setdefault(group, []).append(f"{name}={value}")
    path.write_text("".join(f"[{group}]\n" + "\n".join(lines) + "\n\n" for group, lines in sections.items()))


def _start(qtbot, path, caplog) -> tuple[MainWindow, list[str]]:
    """A window on the settings file at `path`, and the settings warnings it logged."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="duplexcadence"):
        window = MainWindow(AppSettings(QSettings(str(path), QSettings.Format.IniFormat)), device="cpu")
        qtbot.addWidget(window)
        window.show()
    return window, [r.getMessage() for r in caplog.records if r.getMessage().startswith("settings ")]


def _reported_keys(line: str) -> set[str]:
    return {key for key in ABSURD if f" {key}=" in line}


def _names(keys) -> list[str]:
    """What the window calls the settings of `keys`."""
    from app.settings_repair import SETTINGS
    return sorted(SETTINGS[key][0] for key in keys)


def test_every_setting_has_an_absurd_value_here():
    from app.settings_repair import SETTINGS
    assert set(ABSURD) == set(SETTINGS)  # a new setting needs an absurd value above


def test_absurd_values_for_every_key_are_reset_and_said_once(qtbot, tmp_path, caplog):
    path = tmp_path / "settings.ini"
    _ini(path, ABSURD)
    window, warnings = _start(qtbot, path, caplog)
    assert len(warnings) == 1 and _reported_keys(warnings[0]) == set(ABSURD), warnings
    bar = window.settings_bar
    assert bar.isVisible() and bar.text().startswith("Settings that could not be used are back to their defaults")
    assert f"and {len(ABSURD) - 4} more (the log lists them)" in bar.text()
    names = bar.label.toolTip().removeprefix("Back to their defaults: ").split(", ")
    assert sorted(names) == _names(ABSURD)
    # The defaults, from the file itself: a later read finds nothing of what was there.
    settings = window.settings
    assert settings.speaker_volume == 1.0 and settings.theme == "system" and settings.record
    assert settings.recordings_dir == settings.default_recordings_dir()
    assert settings.persona_presets == [] and settings.geometry() is None
    window.close()
    again, warnings = _start(qtbot, path, caplog)
    assert warnings == [] and not again.settings_bar.isVisible()


def test_only_the_values_that_cannot_be_used_are_reset(qtbot, tmp_path, caplog):
    path = tmp_path / "settings.ini"
    _ini(path, {**ABSURD, **USABLE})
    window, warnings = _start(qtbot, path, caplog)
    reset = set(ABSURD) - set(USABLE)
    assert len(warnings) == 1 and _reported_keys(warnings[0]) == reset, warnings
    names = window.settings_bar.label.toolTip().removeprefix("Back to their defaults: ").split(", ")
    assert sorted(names) == _names(reset)
    settings = window.settings
    assert settings.speaker_volume == 0.25 and settings.theme == "dark" and not settings.record
    options = settings.runtime_options
    assert (options.policy, options.tau, options.block, options.seed) == ("listen", 0.75, 8, 42)
    assert [p.name for p in settings.persona_presets] == ["calm"]


def test_a_file_of_garbage_is_kept_aside_and_said_once(qtbot, tmp_path, caplog):
    path = tmp_path / "settings.ini"
    garbage = random.Random(46).randbytes(4096)
    path.write_bytes(garbage)
    window, warnings = _start(qtbot, path, caplog)
    copy = tmp_path / "settings.ini.unreadable"
    assert copy.read_bytes() == garbage  # what the user had is not lost
    assert len(warnings) == 1 and "could not be read" in warnings[0] and str(copy) in warnings[0], warnings
    bar = window.settings_bar
    assert bar.isVisible() and "settings file could not be read" in bar.text() and str(copy) in bar.text()
    window.settings.speaker_volume = 0.5  # the file takes the user's choices again
    window.close()
    again, warnings = _start(qtbot, path, caplog)
    assert warnings == [] and not again.settings_bar.isVisible()
    assert again.settings.speaker_volume == 0.5


def test_usable_settings_say_nothing(qtbot, tmp_path, caplog):
    path = tmp_path / "settings.ini"
    _ini(path, USABLE)
    window, warnings = _start(qtbot, path, caplog)
    assert warnings == [] and not window.settings_bar.isVisible()
