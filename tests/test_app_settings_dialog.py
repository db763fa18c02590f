"""The Settings dialog: every field kept after OK and read back by a new AppSettings on the
same file, nothing kept after Cancel, Restore defaults, values edited by hand in the settings
file falling back to their defaults, PersonaPlex presets, the wheel guard."""
import pytest
from PyQt6.QtCore import QPoint, QPointF, QSettings, Qt, QTimer
from PyQt6.QtGui import QWheelEvent
from PyQt6.QtWidgets import QApplication, QDialogButtonBox

from app.app_settings import SAMPLING, AppSettings, PersonaPreset
from app.window.settings_dialog import SettingsDialog
from engine import RuntimeOptions
from tests.app_helpers import isolated_settings

DEFAULTS = {name: getattr(RuntimeOptions(), name) for name in SAMPLING}
CHOSEN = {"text_temperature": 0.35, "text_top_k": 40, "audio_temperature": 1.2, "audio_top_k": 100,
          "seed": 2 ** 40 + 7}
PERSONA = ("NATM1.pt", "You enjoy a good conversation.")


@pytest.fixture
def settings(tmp_path):
    return isolated_settings(tmp_path)


def _reopened(settings: AppSettings) -> AppSettings:
    """A new AppSettings on the same file, as the next run of the app reads it."""
    settings.q.sync()
    return AppSettings(QSettings(settings.q.fileName(), QSettings.Format.IniFormat))


def _dialog(qtbot, settings, persona=PERSONA) -> SettingsDialog:
    dialog = SettingsDialog(settings, persona=persona)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def _fill(dialog: SettingsDialog, folder, sampling: dict, theme: str) -> None:
    dialog.folder.setText(str(folder))
    for name, spin in dialog.spins.items():
        spin.setValue(sampling[name])
    dialog.seed.setText(str(sampling["seed"]))
    dialog.theme.setCurrentIndex(dialog.theme.findData(theme))


def _click(dialog: SettingsDialog, which: QDialogButtonBox.StandardButton) -> None:
    dialog.buttons.button(which).click()


def _state(settings: AppSettings):
    return settings.recordings_dir, settings.sampling, settings.theme, settings.persona_presets


def test_ok_keeps_every_field_and_a_new_settings_reads_them_back(qtbot, settings, tmp_path):
    dialog = _dialog(qtbot, settings)
    _fill(dialog, tmp_path / "elsewhere", CHOSEN, "dark")
    dialog.presets.save_current("Chatty")
    signals = [dialog.sampling_changed, dialog.recordings_folder_changed, dialog.theme_changed]
    with qtbot.waitSignals(signals, timeout=1000) as blockers:
        _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert [list(b.args) for b in blockers.all_signals_and_args] == [
        [CHOSEN], [str(tmp_path / "elsewhere")], ["dark"]]
    assert not dialog.isVisible()
    again = _reopened(settings)
    assert again.sampling == CHOSEN
    assert again.recordings_dir == tmp_path / "elsewhere"
    assert again.theme == "dark"
    assert again.persona_presets == [PersonaPreset("Chatty", *PERSONA)]
    # Whoever builds options from the settings gets the sampling with the panel's choices.
    options = again.runtime_options
    assert {name: getattr(options, name) for name in SAMPLING} == CHOSEN


def test_the_panels_options_do_not_overwrite_the_sampling(settings):
    settings.sampling = CHOSEN
    settings.runtime_options = RuntimeOptions(policy="listen")  # a copy made before the dialog's choice
    options = _reopened(settings).runtime_options
    assert options.policy == "listen" and options.text_top_k == CHOSEN["text_top_k"]


def test_cancel_keeps_nothing(qtbot, settings, tmp_path):
    before = _state(settings)
    dialog = _dialog(qtbot, settings)
    _fill(dialog, tmp_path / "elsewhere", CHOSEN, "light")
    dialog.presets.save_current("Chatty")
    with qtbot.assertNotEmitted(dialog.sampling_changed), qtbot.assertNotEmitted(dialog.theme_changed), \
            qtbot.assertNotEmitted(dialog.recordings_folder_changed):
        _click(dialog, QDialogButtonBox.StandardButton.Cancel)
    assert not dialog.isVisible()
    assert _state(_reopened(settings)) == before


def test_ok_with_nothing_changed_says_nothing(qtbot, settings):
    settings.sampling = {**CHOSEN, "text_top_k": 200_000, "audio_temperature": 3.5}  # beyond the spin boxes' offer
    dialog = _dialog(qtbot, settings)
    assert dialog.sampling() == settings.sampling
    with qtbot.assertNotEmitted(dialog.sampling_changed), qtbot.assertNotEmitted(dialog.theme_changed), \
            qtbot.assertNotEmitted(dialog.recordings_folder_changed):
        _click(dialog, QDialogButtonBox.StandardButton.Ok)


def test_restore_defaults_shows_the_defaults_and_ok_keeps_them(qtbot, settings, tmp_path):
    settings.sampling = CHOSEN
    settings.theme = "dark"
    settings.persona_presets = [PersonaPreset("Kept", "NATF2.pt", "Be brief.")]
    dialog = _dialog(qtbot, settings)
    assert dialog.sampling() == CHOSEN
    _click(dialog, QDialogButtonBox.StandardButton.RestoreDefaults)
    assert dialog.sampling() == DEFAULTS
    assert dialog.theme.currentData() == "system"
    assert dialog.folder.text() == str(AppSettings.default_recordings_dir())
    _click(dialog, QDialogButtonBox.StandardButton.Ok)
    again = _reopened(settings)
    assert again.sampling == DEFAULTS and again.theme == "system"
    assert again.recordings_dir == AppSettings.default_recordings_dir()
    assert again.q.value("recording/folder") == ""  # follows the default, not a copy of today's
    assert again.persona_presets == [PersonaPreset("Kept", "NATF2.pt", "Be brief.")]


@pytest.mark.parametrize("key,text", [
    ("text_temperature", "hot"), ("text_temperature", "nan"), ("text_temperature", "-0.5"),
    ("text_top_k", "2.5"), ("text_top_k", "-3"), ("audio_temperature", "inf"), ("audio_top_k", ""),
    ("seed", str(2 ** 63)), ("seed", "-1")])
def test_a_bad_stored_sampling_value_falls_back_to_its_default(qtbot, settings, key, text, caplog):
    settings.q.setValue(f"sampling/{key}", text)
    settings.q.setValue("sampling/text_top_k" if key != "text_top_k" else "sampling/seed", 9)  # a good one
    again = _reopened(settings)
    assert again.sampling[key] == DEFAULTS[key]
    assert 9 in again.sampling.values()  # the good value is kept
    assert f"sampling/{key} = {text!r} is refused" in caplog.text and "settings.ini" in caplog.text
    assert _dialog(qtbot, again).sampling()[key] == DEFAULTS[key]


@pytest.mark.parametrize("text", ["not json", '{"a": 1}', '[["name", "voice"]]', '[["a", "b", 3]]', '["abc"]'])
def test_unreadable_presets_are_none(settings, text, caplog):
    settings.q.setValue("persona/presets", text)
    assert _reopened(settings).persona_presets == []
    assert "persona/presets is unreadable" in caplog.text


def test_an_unknown_stored_theme_is_the_systems(settings):
    settings.q.setValue("appearance/theme", "purple")
    assert _reopened(settings).theme == "system"


def test_bad_sampling_values_are_refused_before_anything_is_stored(settings):
    with pytest.raises(ValueError, match="text_top_k must be an integer >= 0"):
        settings.sampling = {**CHOSEN, "text_top_k": -1}
    with pytest.raises(ValueError, match="sampling takes .*; got greedy"):
        settings.sampling = {"greedy": True}
    assert _reopened(settings).sampling == DEFAULTS


def test_a_value_the_engine_refuses_keeps_the_dialog_open_and_says_why(qtbot, settings, tmp_path):
    dialog = _dialog(qtbot, settings)
    dialog.seed.setText(str(2 ** 63))
    _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert dialog.isVisible() and "seed must be an integer in [0, 2**63)" in dialog.problem.text()
    dialog.seed.setText("")
    _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert dialog.isVisible() and "seed: give a whole number" in dialog.problem.text()
    dialog.seed.setText("5")
    (tmp_path / "a file").write_text("")
    dialog.folder.setText(str(tmp_path / "a file"))
    _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert dialog.isVisible() and "is a file, not a folder" in dialog.problem.text()
    assert _reopened(settings).sampling == DEFAULTS


def test_presets_are_saved_used_and_deleted(qtbot, settings):
    dialog = _dialog(qtbot, settings)
    box = dialog.presets
    assert not box.use_button.isEnabled()
    box.save_current("Chatty")
    box.current = PersonaPreset("", "", "Say little.")  # the Model box with no voice prompt
    box.save_current("Quiet")
    box.save_current("Chatty")  # the same name replaces, in place
    assert box.presets() == [PersonaPreset("Chatty", "", "Say little."), PersonaPreset("Quiet", "", "Say little.")]
    box.select("Quiet")
    with qtbot.waitSignal(dialog.persona_chosen, timeout=1000) as used:
        box.use_button.click()
    assert used.args == ["", "Say little."]
    box.delete_button.click()
    assert [p.name for p in box.presets()] == ["Chatty"]
    _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert _reopened(settings).persona_presets == [PersonaPreset("Chatty", "", "Say little.")]


def test_save_current_as_asks_for_a_name(qtbot, settings):
    dialog = _dialog(qtbot, settings)

    def answer():
        asked = QApplication.activeModalWidget()
        asked.setTextValue("  Chatty  ")
        asked.accept()
    QTimer.singleShot(0, answer)
    dialog.presets.save_button.click()
    assert dialog.presets.presets() == [PersonaPreset("Chatty", *PERSONA)]
    assert dialog.presets.selected().name == "Chatty"


def test_without_a_personaplex_model_there_is_nothing_to_save(qtbot, settings):
    settings.persona_presets = [PersonaPreset("Kept", "NATF2.pt", "Be brief.")]
    dialog = _dialog(qtbot, settings, persona=None)
    assert not dialog.presets.save_button.isEnabled()
    assert "Load a model that takes a role prompt" in dialog.presets.current_label.text()
    dialog.presets.select("Kept")
    with qtbot.waitSignal(dialog.persona_chosen, timeout=1000) as used:
        dialog.presets.use_button.click()
    assert used.args == ["NATF2.pt", "Be brief."]


def test_every_control_says_what_it_does(qtbot, settings):
    dialog = _dialog(qtbot, settings)
    controls = [*dialog.spins.values(), dialog.seed, dialog.folder, dialog.browse_button, dialog.theme,
                dialog.presets.list, dialog.presets.save_button, dialog.presets.use_button,
                dialog.presets.delete_button, *dialog.buttons.buttons()]
    assert [c for c in controls if not c.toolTip()] == []


def test_the_wheel_changes_no_unfocused_field(qtbot, settings):
    dialog = _dialog(qtbot, settings)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).setFocus()
    before = dialog.sampling(), dialog.theme.currentIndex()
    for control in [*dialog.spins.values(), dialog.theme]:
        assert control.focusPolicy() == Qt.FocusPolicy.StrongFocus
        centre = QPointF(control.rect().center())
        QApplication.sendEvent(control, QWheelEvent(
            centre, QPointF(control.mapToGlobal(centre)), QPoint(0, 0), QPoint(0, -360), Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False))
    assert (dialog.sampling(), dialog.theme.currentIndex()) == before


def test_values_edited_by_hand_open_and_stay_as_stored_unless_changed(qtbot, settings):
    """A settings file may hold what the boxes cannot show exactly: a temperature with three
    decimals, a top-k beyond a spin box's range. The dialog opens, and OK with nothing touched
    keeps them (and says nothing changed)."""
    settings.sampling = {**settings.sampling, "text_temperature": 0.725, "audio_top_k": 2 ** 40}
    stored = settings.sampling
    dialog = _dialog(qtbot, settings)
    with qtbot.assertNotEmitted(dialog.sampling_changed):
        _click(dialog, QDialogButtonBox.StandardButton.Ok)
    assert settings.sampling == stored
