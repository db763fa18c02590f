"""Which model the window talks with, offscreen with real widgets and the app's own loader: a
failed load keeps the model that works; Start talks with the loaded model whichever is chosen,
and says which; the model used last is offered at start, not loaded; a download made from the
CLI is noticed when the user comes back; the Voice and Role fields are the loaded model's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PyQt6.QtWidgets import QLineEdit, QWidget

from app.audio.file_feed import FileFeed
from app.window.main_window import MainWindow
from engine import READY, REMOTE, HubClient
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME, TOKENIZER_NAME
from tests.app_helpers import isolated_settings, keep_torch_threads  # noqa: F401  (fixture)
from tests.hub_fixtures import BF16, hub, q8_folder  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parent.parent
SPEECH = REPO / "assets" / "speech_sample.wav"


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: "demo" in w.model_picker.entries, timeout=30_000)
    yield w
    w.close()


def _load(qtbot, window, source: str) -> None:
    window.model_picker.select(source)
    with qtbot.waitSignals([window.models.signals.loaded], timeout=120_000):
        window.model_picker.action_button.click()


def _fail_to_load(qtbot, window, source: str) -> None:
    window.model_picker.select(source)
    with qtbot.waitSignal(window.models.failed, timeout=120_000):
        window.model_picker.action_button.click()


def _talk(qtbot, window, frames: int = 3) -> None:
    """A short conversation from a file: the loaded session works."""
    window.conversation.start(FileFeed(SPEECH))
    qtbot.waitUntil(lambda: window.panel.stats.frames >= frames, timeout=60_000)
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()


def _broken_tokenizer(tmp_path) -> Path:
    """The demo with a text tokenizer that is not one: its header and memory plan are fine, so
    the failure comes while loading, after any room was made."""
    folder = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "broken-tokenizer")
    (folder / TOKENIZER_NAME).write_bytes(b"not a sentencepiece model")
    return folder


def test_a_failed_load_keeps_the_model_that_works(qtbot, window, tmp_path):
    _load(qtbot, window, "demo")
    working = window.models.loaded
    window.model_picker.role.setText("Be brief.")  # typed, not yet used
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / LM_NAME).write_bytes(b"not a safetensors file")
    _fail_to_load(qtbot, window, str(broken))
    assert window.models.loaded is working  # not unloaded: its session is the one still there
    assert f"Could not load {broken}; {working.name} is still loaded." == window.model_picker.status.text()
    assert f"Start still talks with {working.name}." in window.models.last_dialog.informativeText()
    assert window.start_button.isEnabled() and window.compute_label.text() != "Compute: no model loaded"
    assert window.model_picker.voice.isVisibleTo(window)  # the demo's fields, for the demo, as left
    assert window.model_picker.role.text() == "Be brief."
    _talk(qtbot, window)
    assert window.conversation.last_end.frames >= 3


def test_a_model_that_needed_the_room_is_followed_by_the_previous_one_loaded_again(qtbot, window, tmp_path,
                                                                                  monkeypatch):
    from app.models import model_loader

    # Stand-in for a GPU that holds one 7B model, not two (there is no GPU here): the loaded model
    # is closed to make room, and the failure brings it back.
    monkeypatch.setattr(model_loader, "fits_beside", lambda memory: False, raising=False)
    _load(qtbot, window, "demo")
    closed = window.models.loaded
    broken = _broken_tokenizer(tmp_path)
    _fail_to_load(qtbot, window, str(broken))
    again = window.models.loaded
    assert again is not None and again is not closed and again.source == "demo"
    assert str(broken / TOKENIZER_NAME) in window.models.last_dialog.text()
    assert window.start_button.isEnabled()
    _talk(qtbot, window)


def test_start_talks_with_the_loaded_model_whichever_is_chosen_and_says_which(qtbot, window, tmp_path):
    _load(qtbot, window, "demo")
    loaded = window.models.loaded
    name = loaded.name
    picker, start = window.model_picker, window.start_button
    picker.select(str(tmp_path))  # another choice, not loaded
    assert start.isEnabled() and start.toolTip() == f"Talk with {name}, the model loaded."
    assert picker.status.text() == f"Loaded: {name}. Start talks with it; Load switches to the model chosen above."
    _talk(qtbot, window)  # what Start does, from a file: with the loaded model, not a load of the chosen one
    assert window.models.loaded is loaded
    assert f"{name} · " in window.transcript.toPlainText()  # the conversation says which model it is
    assert [t for t in threading.enumerate() if t.name == "engine-loader"] == []
    picker.select("demo")
    assert picker.status.text().startswith(f"Loaded {name} on CPU")


def test_the_model_used_last_is_offered_with_load_and_not_loaded(qtbot, tmp_path):
    folder = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "my-model")
    settings = isolated_settings(tmp_path)
    first = MainWindow(settings, device="cpu")  # a first run: nothing remembered
    qtbot.addWidget(first)
    qtbot.waitUntil(lambda: "demo" in first.model_picker.entries, timeout=30_000)
    assert first.model_picker.status.text().startswith("No model loaded: press Load to try the built-in demo")
    first.close()
    settings.remember_folder(str(folder))
    settings.model_source = str(folder)
    window = MainWindow(settings, device="cpu")
    qtbot.addWidget(window)
    window.show()
    picker = window.model_picker
    qtbot.waitUntil(lambda: str(folder) in picker.entries, timeout=30_000)
    qtbot.waitUntil(lambda: "Last time" in picker.status.text(), timeout=10_000)
    assert picker.status.text() == f"Last time you talked with {folder}: press Load to talk with it again."
    assert picker.source() == str(folder) and picker.action_button.text() == "Load"
    assert picker.action_button.hasFocus() and picker.action_button.isEnabled()
    qtbot.wait(500)
    assert window.models.loaded is None and not [t for t in threading.enumerate() if t.name == "engine-loader"]
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()
    assert window.models.loaded.source == str(folder)
    window.close()


def test_the_offer_never_takes_the_keys_from_a_field_being_typed_in(qtbot, tmp_path):
    settings = isolated_settings(tmp_path)
    settings.model_source = "demo"
    window = MainWindow(settings, device="cpu")
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: "Last time" in window.model_picker.status.text(), timeout=30_000)
    field = QLineEdit(window.centralWidget())  # as the role prompt, once a model shows it
    field.show()
    field.setFocus()  # the user clicked into it before the first listing ended
    window.models.offer_remembered()  # as that listing's end calls it
    assert window.focusWidget() is field
    field.clearFocus()
    window.models.offer_remembered()
    assert window.focusWidget() is window.model_picker.action_button  # else Load has the keys


def _cli(hub, home, *args):
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home)}
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)


def _come_back(qtbot, window) -> None:
    """The user goes to the terminal and comes back to the window (activation, as a click gives)."""
    other = QWidget()
    qtbot.addWidget(other)
    other.show()
    other.activateWindow()
    qtbot.waitUntil(lambda: not window.isActiveWindow(), timeout=5_000)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)


def test_a_download_or_removal_made_from_the_cli_is_noticed(qtbot, tmp_path, monkeypatch, hub):
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    window = MainWindow(isolated_settings(tmp_path), device="cpu",
                        hub_client=HubClient(endpoint=hub.endpoint, cache_dir=cache))
    qtbot.addWidget(window)
    window.show()
    picker = window.model_picker
    qtbot.waitUntil(lambda: BF16 in picker.entries, timeout=30_000)
    picker.select(BF16)
    assert picker.entry().state == REMOTE and picker.action_button.text() == "Download"
    result = _cli(hub, tmp_path, "download", BF16, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    _come_back(qtbot, window)
    qtbot.waitUntil(lambda: picker.entry().state == READY, timeout=30_000)
    assert picker.source() == BF16 and picker.action_button.text() == "Load"
    assert picker.combo.currentText() == BF16  # no longer "(not downloaded)"
    assert _cli(hub, tmp_path, "remove", BF16).returncode == 0
    _come_back(qtbot, window)
    qtbot.waitUntil(lambda: picker.entry().state == REMOTE, timeout=30_000)
    assert picker.action_button.text() == "Download"
    window.close()


def _moshi_folder(folder: Path) -> Path:
    """A small Moshi-variant checkpoint: no voice prompts, no role prompt (as moshiko)."""
    from tests import mimi_reference
    from tests.lm_reference import make_reference_lm, save_official, small_lm_kwargs, write_tokenizer
    mimi_cfg = mimi_reference.small_config()
    mimi_reference.save_official(mimi_reference.build_reference(mimi_cfg, num_codebooks=8, seed=2), mimi_cfg, folder)
    kwargs = small_lm_kwargs(dep_q=8, card=mimi_cfg["quantizer"]["bins"])
    save_official(make_reference_lm(kwargs, seed=4), folder / LM_NAME)
    (folder / "config.json").write_text(json.dumps(kwargs))
    write_tokenizer(folder / TOKENIZER_NAME)
    return folder


def test_voice_and_role_are_what_the_loaded_model_declares(qtbot, window, tmp_path):
    picker = window.model_picker
    assert not picker.voice.isVisibleTo(window) and not picker.role.isVisibleTo(window)  # nothing loaded
    _load(qtbot, window, "demo")  # PersonaPlex-shaped, with a voice
    assert picker.voice.isVisibleTo(window) and picker.role.isVisibleTo(window)
    no_voices = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "personaplex-no-voices")
    shutil.rmtree(no_voices / "voices")
    _load(qtbot, window, str(no_voices))  # a role prompt, but no voice prompts
    assert picker.role.isVisibleTo(window) and not picker.voice.isVisibleTo(window)
    assert "takes a role prompt" in picker.role.toolTip()
    picker.role.setText("Be brief.")
    assert window.conversation._persona(window.models.loaded) == (None, "Be brief.")
    moshi = _moshi_folder(tmp_path / "moshi-small")
    _load(qtbot, window, str(moshi))  # Moshi: neither
    assert not picker.role.isVisibleTo(window) and not picker.voice.isVisibleTo(window)
    assert window.conversation._persona(window.models.loaded) is None
    start = time.monotonic()
    _talk(qtbot, window)
    assert time.monotonic() - start < 60
