"""The model library in the window, offscreen, against a Hub server of ours on 127.0.0.1
through the real huggingface_hub client: pick a model, see its size and fit, download it
with progress, talk at once; cancel and finish later; a gated model's token; remove."""
from __future__ import annotations

import pytest
from PyQt6.QtWidgets import QMessageBox

from app.models.model_picker import ModelPicker
from app.window.main_window import MainWindow
from engine import PARTIAL, REMOTE, HubClient
from engine.files.paths import LM_NAME
from tests.app_helpers import isolated_settings, keep_torch_threads, load_selected, removal_dialog  # noqa: F401  (fixture)
from tests.hub_fixtures import BF16, GATED, GOOD_TOKEN, hub, q8_folder  # noqa: F401  (fixtures)


@pytest.fixture()
def window(qtbot, tmp_path, monkeypatch, hub):
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # where the loader looks
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    w = MainWindow(isolated_settings(tmp_path), device="cpu",
                   hub_client=HubClient(endpoint=hub.endpoint, cache_dir=cache))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: BF16 in w.model_picker.entries, timeout=30_000)
    return w


def test_pick_see_the_size_download_with_progress_and_talk_at_once(qtbot, window):
    picker = window.model_picker
    picker.select(BF16)
    assert picker.action_button.text() == "Download"
    qtbot.waitUntil(lambda: picker.fit.text().startswith("Download 8.2 MB ("), timeout=30_000)
    assert "free in" in picker.fit.text() and "needs about" in picker.fit.text()
    shown = []
    window.library.signals.progress.connect(lambda p: shown.append(picker.busy.format()))
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()
    assert any(" of 8.2 MB" in text for text in shown)
    assert window.models.loaded.source == BF16 and picker.entry().state == "ready"
    assert picker.action_button.text() == "Load" and picker.remove_button.isVisible()


def test_cancel_keeps_what_is_complete_and_finish_download_fetches_the_rest(qtbot, window, hub):
    picker = window.model_picker
    hub.delay_per_chunk = 0.05
    picker.select(BF16)
    picker.action_button.click()
    qtbot.waitUntil(lambda: f"Downloading {BF16}: {LM_NAME}" in picker.status.text(), timeout=30_000)
    assert picker.cancel_button.isVisible() and not picker.action_button.isEnabled()
    picker.cancel_button.click()
    qtbot.waitUntil(lambda: "cancelled" in window.message_bar.text(), timeout=30_000)
    qtbot.waitUntil(lambda: picker.entry().state == PARTIAL, timeout=30_000)
    assert picker.action_button.text() == "Finish download" and picker.action_button.isEnabled()
    hub.delay_per_chunk = 0
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()


def test_a_gated_model_says_so_and_takes_a_token(qtbot, window):
    picker = window.model_picker
    picker.select(GATED)
    qtbot.waitUntil(lambda: "Gated" in picker.about.text(), timeout=30_000)
    assert f"href='{window.library.hub.client().page(GATED)}'" in picker.about.text()
    assert picker.token_button.isVisible()
    picker.token_given.emit(GOOD_TOKEN)  # what the token dialog sends
    qtbot.waitUntil(lambda: "Access token stored for listener" in window.message_bar.text(), timeout=30_000)
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()
    assert window.models.loaded.source == GATED and picker.voice.isVisible()


def test_remove_asks_then_frees_the_files(qtbot, window):
    picker = window.model_picker
    picker.select(BF16)
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()
    picker.remove_button.click()  # the loaded model's files are not pulled from under it
    assert f"{BF16} is loaded: cancel or load another model first" in window.message_bar.text()
    assert window.library.last_dialog is None
    picker.select("demo")
    load_selected(qtbot, window, picker)
    dialog = removal_dialog(window, picker, BF16)
    assert dialog.isVisible() and BF16 in dialog.text()
    dialog.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: f"Removed {BF16}" in window.message_bar.text(), timeout=30_000)
    qtbot.waitUntil(lambda: picker.entry().state == REMOTE, timeout=30_000)


def test_a_folder_that_is_not_a_model_is_not_remembered(qtbot, window, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    window.model_picker.folder_chosen.emit(str(folder))  # what the folder dialog sends
    assert f"{folder} is not a model folder: it has no model.safetensors" in window.message_bar.text()
    assert window.settings.model_folders == []


def test_loading_reports_the_weights_read_in_bytes(qtbot, tmp_path):
    """The load's progress is determinate where the loader knows the bytes: each checkpoint
    file read into the model, tensor by tensor, up to all of it."""
    from engine import load_model, reporting_progress

    reports = []
    with reporting_progress(lambda name, done, total: reports.append((name, done, total))):
        load_model("demo")
    names = {name for name, _, _ in reports}
    assert "model.safetensors" in names
    lm = [(done, total) for name, done, total in reports if name == "model.safetensors"]
    assert [d for d, _ in lm] == sorted(d for d, _ in lm) and lm[-1][0] == lm[-1][1] > 0
    seen = len(reports)
    load_model("demo")  # outside the block nothing is reported
    assert len(reports) == seen

    picker = ModelPicker(isolated_settings(tmp_path))
    qtbot.addWidget(picker)
    picker.show_weights_read("model.safetensors", 6 * 10**9, 15 * 10**9)
    assert picker.busy.maximum() == 1000 and picker.busy.value() == 400
    assert picker.busy.format() == "Reading model.safetensors: 6.0 GB of 15.0 GB"
