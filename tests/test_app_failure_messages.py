"""Failures in the window say what failed and what to do, in the window and in the log file, and
the buttons follow (Download stays available only where pressing it again can work): offscreen,
against the Hub server of ours on 127.0.0.1 through the real huggingface_hub client; and the log
is one menu away (Help → Show log)."""
from __future__ import annotations

import logging
import shutil
import threading

import pytest
from PyQt6.QtCore import QObject, QUrl, pyqtSlot
from PyQt6.QtGui import QDesktopServices

from app.crash_reporting import default_log_dir, setup_logging
from app.window.main_window import MainWindow
from engine import HubClient
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from tests.app_helpers import isolated_settings, keep_torch_threads  # noqa: F401  (fixture)
from tests.fake_hub import FakeHub
from tests.hub_fixtures import BF16, GATED, GOOD_TOKEN, Q8, demo_files, hub, q8_folder  # noqa: F401  (fixtures)


@pytest.fixture
def log_file(tmp_path):
    """The app's log file, as run_app sets it up, in the test's folder."""
    path = setup_logging(tmp_path / "logs")
    yield path
    for name in ("duplexcadence", "engine"):
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if getattr(h, "baseFilename", None) == str(path)]:
            logger.removeHandler(handler)
            handler.close()


def _window(qtbot, tmp_path, monkeypatch, endpoint: str) -> MainWindow:
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    w = MainWindow(isolated_settings(tmp_path), device="cpu", hub_client=HubClient(endpoint=endpoint, cache_dir=cache))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: BF16 in w.model_picker.entries, timeout=30_000)
    return w


def _hub_threads_done(qtbot) -> None:
    """The window asks the Hub again on its own (a listing after a failure picks the model anew):
    those questions end (the client retries a refused connection for about 25 s) before the
    next test's Hub server takes their place."""
    qtbot.waitUntil(lambda: not [t for t in threading.enumerate() if t.name in ("download-check", "model-download")],
                    timeout=90_000)


def _logged(path) -> str:
    for handler in logging.getLogger("duplexcadence").handlers:
        handler.flush()
    return path.read_text() if path.exists() else ""


def test_no_network_says_so_and_download_stays_available(qtbot, tmp_path, monkeypatch, hub, log_file):
    window = _window(qtbot, tmp_path, monkeypatch, hub.endpoint)
    picker = window.model_picker
    picker.select(BF16)
    qtbot.waitUntil(lambda: picker.fit.text().startswith("Download "), timeout=30_000)  # the Hub was asked
    hub.__exit__(None, None, None)  # then the network goes
    picker.action_button.click()
    qtbot.waitUntil(lambda: window.message_bar.text() != "", timeout=60_000)
    text = window.message_bar.text()
    assert text.startswith(f"Could not download {BF16}: cannot reach {hub.endpoint}")
    assert text.endswith("When it is back, press Download again: the files already complete are kept.")
    assert window.message_bar.kind == "error" and picker.status.text() == f"{BF16}: not downloaded."
    assert picker.action_button.isEnabled() and picker.action_button.text() == "Download"  # retrying can work
    assert text in _logged(log_file)
    _hub_threads_done(qtbot)


def test_no_network_from_the_start_is_said_before_download_is_pressed(qtbot, tmp_path, monkeypatch):
    window = _window(qtbot, tmp_path, monkeypatch, "http://127.0.0.1:9")  # refused at once
    picker = window.model_picker
    picker.select(BF16)
    qtbot.waitUntil(lambda: "cannot reach" in picker.fit.text(), timeout=60_000)
    assert picker.fit.text().startswith(f"Could not download {BF16}: cannot reach http://127.0.0.1:9")
    assert "press Download again" in picker.fit.text() and picker.action_button.isEnabled()
    _hub_threads_done(qtbot)


def test_a_gated_model_without_a_token_says_what_to_do_and_download_waits_for_the_token(
        qtbot, tmp_path, monkeypatch, hub, log_file):
    window = _window(qtbot, tmp_path, monkeypatch, hub.endpoint)
    picker = window.model_picker
    picker.select(GATED)
    picker.action_button.click()  # at once, before the window knows it is gated
    qtbot.waitUntil(lambda: window.message_bar.text() != "", timeout=60_000)
    text = window.message_bar.text()
    assert text.startswith(f"Could not download {GATED}: {GATED} is gated: accept its licence at "
                           f"{hub.endpoint}/{GATED}")
    assert text.endswith("Download is available again once a token is stored (Access token…).")
    assert text in _logged(log_file)
    assert not picker.action_button.isEnabled() and "Access token" in picker.action_button.toolTip()
    assert picker.token_button.isVisible() and picker.token_button.isEnabled()
    picker.token_given.emit(GOOD_TOKEN)  # what the token dialog sends
    qtbot.waitUntil(picker.action_button.isEnabled, timeout=30_000)
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()


def test_a_refused_token_asks_for_a_new_one(qtbot, tmp_path, monkeypatch, hub):
    (tmp_path / "token").write_text("hf_revoked")  # stored once, since revoked
    window = _window(qtbot, tmp_path, monkeypatch, hub.endpoint)
    picker = window.model_picker
    picker.select(BF16)
    qtbot.waitUntil(lambda: "refused the access token" in picker.fit.text(), timeout=60_000)
    assert "Give a new one with Access token…" in picker.fit.text()
    assert not picker.action_button.isEnabled() and picker.token_button.isVisible()
    picker.token_given.emit(GOOD_TOKEN)
    qtbot.waitUntil(lambda: picker.fit.text().startswith("Download "), timeout=60_000)
    assert picker.action_button.isEnabled()


def test_a_missing_q8_twin_says_to_download_the_bf16_files(qtbot, tmp_path, monkeypatch):
    with FakeHub() as only_bf16:  # the Hub has the bf16 repository, not its -q8 twin
        only_bf16.add_repo(BF16, demo_files())
        window = _window(qtbot, tmp_path, monkeypatch, only_bf16.endpoint)
        picker = window.model_picker
        picker.select(BF16)
        picker.weights.setCurrentIndex(picker.weights.findData("int8"))
        qtbot.waitUntil(lambda: "int8 files are not on this Hub" in picker.fit.text(), timeout=60_000)
        assert picker.fit.text().startswith(f"Could not download {BF16}: ") and Q8 in picker.fit.text()
        assert "choose bf16 weights to download its bf16 files" in picker.fit.text()
        assert not picker.action_button.isEnabled()  # pressing it again cannot work
        picker.weights.setCurrentIndex(picker.weights.findData("bf16"))
        qtbot.waitUntil(lambda: picker.fit.text().startswith("Download "), timeout=60_000)
        assert picker.action_button.isEnabled()


def test_a_failed_load_says_what_failed_and_what_to_do(qtbot, tmp_path, log_file):
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    window.show()
    broken = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "cut")
    lm = broken / LM_NAME
    lm.write_bytes(lm.read_bytes()[: lm.stat().st_size // 2])  # a download cut short, by another tool
    window.model_picker.select(str(broken))
    with qtbot.waitSignal(window.models.failed, timeout=120_000):
        window.models.load()
    dialog = window.models.last_dialog
    assert dialog.isVisible() and str(lm) in dialog.text() and "Traceback" not in dialog.text()
    assert dialog.informativeText().startswith("Its files cannot be used as they are: for a downloaded model, "
                                               "Remove it and download it again")
    logged = _logged(log_file)
    assert f"could not load {broken}: {dialog.text()}" in logged


class _Opened(QObject):
    """Where QDesktopServices sends file URLs while a test runs (Qt's own hook for a handler): the
    desktop's viewer is not started from a test."""

    def __init__(self):
        super().__init__()
        self.urls: list[QUrl] = []

    @pyqtSlot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_help_show_log_opens_the_log_file_or_says_where_it_will_be(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    show_log = next(a for a in help_menu.actions() if a.text() == "Show log")
    logs = default_log_dir()
    assert tmp_path in logs.parents and not logs.exists()
    show_log.trigger()  # nothing logged yet, no folder: the dialog says where it will be
    assert f"Nothing is logged yet; the log will be {logs / 'duplexcadence.log'}" in window.last_dialog.text()
    opened = _Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        path = setup_logging(logs)
        logging.getLogger("duplexcadence").info("something to read")
        show_log.trigger()
        assert opened.urls == [QUrl.fromLocalFile(str(path))]
    finally:
        QDesktopServices.unsetUrlHandler("file")
        for handler in [h for h in logging.getLogger("duplexcadence").handlers
                        if getattr(h, "baseFilename", None) == str(path)]:
            logging.getLogger("duplexcadence").removeHandler(handler)
            logging.getLogger("engine").removeHandler(handler)
            handler.close()
