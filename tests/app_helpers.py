"""Shared pieces of the app tests: isolated settings, a window, the demo model loaded once."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PyQt6.QtCore import QSettings, Qt  # noqa: E402

from app.app_settings import AppSettings  # noqa: E402
from app.models.model_loader import LoadedModel, LoaderSignals, ModelLoader  # noqa: E402


def isolated_settings(folder) -> AppSettings:
    """Settings in a test folder (never the user's), recordings beside them."""
    q = QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat)
    q.setValue("recording/folder", str(folder / "recordings"))
    return AppSettings(q)


def load_demo() -> LoadedModel:
    """The demo model through the app's own loader thread (direct connections: the results
    are collected on that thread, no event loop needed)."""
    signals = LoaderSignals()
    results = []
    signals.loaded.connect(results.append, Qt.ConnectionType.DirectConnection)
    signals.failed.connect(lambda *failure: results.append(failure),
                           Qt.ConnectionType.DirectConnection)
    loader = ModelLoader("demo", "cpu", signals)
    loader.start()
    loader.join()
    assert isinstance(results[-1], LoadedModel), results
    return results[-1]


@pytest.fixture(autouse=True, scope="module")
def keep_torch_threads():
    """The app's loader sets torch's (process-wide) thread count for the GUI's sake; give
    the other test modules theirs back."""
    import torch
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def demo_window(tmp_path, demo_model, audio_config):
    """The main window with the demo model loaded and short prompts (a fast start), shown."""
    from app.window.main_window import MainWindow
    w = MainWindow(isolated_settings(tmp_path), device="cpu", audio_config=audio_config)
    w.show()
    w.model_picker.select("demo")
    w.models.set_model(demo_model)
    w.model_picker.voice.setCurrentText("No voice prompt")
    w.model_picker.role.setText("Hi.")
    return w


def combo_texts(combo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def choose(combo, text: str) -> None:
    """As the user does: pick an item (`activated` is what a click emits)."""
    index = combo_texts(combo).index(text)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def load_selected(qtbot, window, picker) -> None:
    """Press the picker's Load and wait for the model to be ready."""
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()


def removal_dialog(window, picker, name: str):
    """Select `name` in the picker, press Remove: the confirmation it asks."""
    picker.select(name)
    picker.remove_button.click()
    return window.library.last_dialog
