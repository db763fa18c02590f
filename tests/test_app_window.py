"""The main window offscreen: loading, conversations from a file, runtime switches reaching
the session, recordings, settings, messages for missing devices and bad checkpoints."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.audio import audio_devices  # noqa: E402  (after app_helpers chose the Qt platform)
from app.audio.file_feed import FileFeed  # noqa: E402
from app.window.main_window import MainWindow  # noqa: E402
from tests.app_helpers import isolated_settings, keep_torch_threads, load_demo  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
SPEECH = REPO / "assets" / "speech_sample.wav"
MIMI_FILE = "tokenizer-e351c8d8-checkpoint125.safetensors"
TOKENIZER_NAME = "tokenizer_spm_32k_3.model"


@pytest.fixture(scope="module")
def demo_model(qapp):
    return load_demo()


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()


def _run_file_conversation(qtbot, window, frames: int):
    window.model_picker.voice.setCurrentText("No voice prompt")  # short prompts: fast start
    window.model_picker.role.setText("Hi.")
    window.conversation.start(FileFeed(SPEECH))
    qtbot.waitUntil(lambda: window.panel.stats.frames >= frames, timeout=60_000)


def _stop(qtbot, window):
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    assert not window.conversation.running and window.start_button.isEnabled()
    assert not [t for t in threading.enumerate() if t.name == "engine-conversation"]


def test_the_window_does_not_import_torch():
    # The window shares the engine's audio constants (engine.files.audio, no torch); the models
    # and torch load on the loader thread only.
    code = ("import sys; import app.window.main_window; "
            "assert 'torch' not in sys.modules and 'engine.session' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_the_app_closes_cleanly_when_asked_to(tmp_path):
    """SIGTERM (a session logout, `kill`) closes the window as its close button does."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "QT_QPA_PLATFORM": "offscreen"}
    app = subprocess.Popen([sys.executable, "-m", "app", "--model", "demo"], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path / "data" / "DuplexCadence" / "DuplexCadence" / "logs" / "duplexcadence.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and app.poll() is None:
        if log.is_file() and "loaded demo on CPU" in log.read_text():
            break
        time.sleep(0.5)
    app.send_signal(signal.SIGTERM)
    output, _ = app.communicate(timeout=60)
    assert app.returncode == 0, output
    text = log.read_text()
    assert "loaded demo on CPU (CPU: no NVIDIA GPU found)" in text and "exiting (status 0)" in text
    assert "Traceback" not in text + output


def test_loads_the_demo_model_and_shows_what_it_can_do(qtbot, window):
    with qtbot.waitSignal(window.models.signals.loaded, timeout=120_000):
        window.models.load()
    assert window.model_picker.busy.isHidden()
    assert "Loaded demo" in window.model_picker.status.text()
    # Which device, and why: this machine has no NVIDIA GPU.
    assert window.compute_label.text() == "Compute: CPU: no NVIDIA GPU found"
    assert window.model_picker.voice.isVisibleTo(window)  # the demo is PersonaPlex-shaped
    assert window.model_picker.voice.findText("DEMO") >= 0
    assert not window.device_picker.barge_in.isEnabled()  # it hears the person every 80 ms: never interrupted
    caps = window.models.loaded.capabilities
    for name in ("graph_replay", "demand_sized_state"):
        box = getattr(window.panel.controls, name)
        assert box.isEnabled() == (caps[name] is None)
        if caps[name] is not None:
            assert caps[name] in box.toolTip()
    items = window.panel.controls.policy.model()
    for row, value in enumerate(("ar", "listen", "speak")):
        assert items.item(row).isEnabled() == (caps[f"policy.{value}"] is None)


def test_a_bad_checkpoint_gets_a_dialog_naming_the_file(qtbot, window, tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    window.model_picker.select(str(folder))
    with qtbot.waitSignal(window.models.signals.failed, timeout=120_000):
        window.models.load()
    dialog = window.models.last_dialog
    assert dialog is not None and dialog.isVisible()
    assert str(folder / "model.safetensors") in dialog.text()
    assert "Traceback" not in dialog.text()
    assert window.models.loaded is None and window.model_picker.action_button.isEnabled()
    assert window.compute_label.text() == "Compute: no model loaded"
    assert not window.panel.controls.graph_replay.isEnabled()


def test_conversation_fills_transcript_panel_and_recording(qtbot, window, demo_model):
    window.model_picker.select("demo")
    window.models.set_model(demo_model)
    _run_file_conversation(qtbot, window, frames=20)
    assert window.stop_button.isEnabled() and not window.start_button.isEnabled()
    assert not window.model_picker.action_button.isEnabled()
    view = window.conversation_view
    assert view.recording.isVisible() and "Model" in view.indicator.text()
    _stop(qtbot, window)
    assert not view.recording.isVisible() and view.indicator.text() == "Not in a conversation"
    assert "[0:00] " in window.transcript.toPlainText()  # the model's words, time-marked
    end = window.conversation.last_end
    audio, rate = sf.read(end.recording, dtype="float32")
    assert rate == 24000 and audio.shape == (end.frames * 1920, 2)
    assert end.frames >= window.panel.stats.frames >= 20
    assert audio[:, 0].std() > 0.01  # the speech file, as the engine heard it
    record = json.loads(end.transcript.read_text())
    assert record["frames"] == end.frames and record["model"] == demo_model.name
    words = [w["word"] for w in record["words"]]
    assert words and all(w in window.transcript.toPlainText() for w in words)
    assert all(0 <= w["start"] < w["end"] <= end.frames * 0.08 + 1e-6 for w in record["words"])
    assert "Each 80 ms step took" in window.panel.frame_label.text()
    # One bar per completed second, as the session measured it.
    assert window.panel.stats.seconds == demo_model.session.speak_times
    assert len(window.panel.stats.seconds) >= 1


def test_switches_reach_the_running_session(qtbot, window, demo_model):
    window.models.set_model(demo_model)
    session = demo_model.session
    _run_file_conversation(qtbot, window, frames=2)
    controls = window.panel.controls
    # A switch the engine cannot honour yet is disabled for the user, but the value path
    # is the same: flip it programmatically and watch the session pick it up.
    controls.graph_replay.setChecked(True)
    qtbot.waitUntil(lambda: session.options.graph_replay, timeout=20_000)
    controls.demand_sized_state.setChecked(True)
    qtbot.waitUntil(lambda: session.options.demand_sized_state, timeout=20_000)
    if demo_model.capabilities["policy.listen"] is not None:
        controls.policy.setCurrentIndex(1)
        qtbot.waitUntil(lambda: "Option not applied" in window.statusBar().currentMessage(),
                        timeout=20_000)
        assert session.options.policy == "ar"
    window.device_picker.set_muted(True)
    muted_from = window.panel.stats.frames + 2  # the frame in flight may predate the switch
    qtbot.waitUntil(lambda: window.panel.stats.frames >= muted_from + 3, timeout=20_000)
    assert window.device_picker.meter.value() == window.device_picker.meter.minimum()
    _stop(qtbot, window)
    record = json.loads(window.conversation.last_end.transcript.read_text())
    changes = record["option_changes"]
    assert changes[-1]["demand_sized_state"] is True and changes[-1]["graph_replay"] is True
    audio, _ = sf.read(window.conversation.last_end.recording, dtype="float32")
    assert np.all(audio[muted_from * 1920:, 0] == 0) and audio[:muted_from * 1920, 0].any()


def test_models_in_the_hugging_face_cache_are_offered_with_their_state(qtbot, tmp_path, monkeypatch):
    import huggingface_hub.constants
    for repo, files in (("tiny-duplex", ("model.safetensors", MIMI_FILE, TOKENIZER_NAME)),
                        ("half-duplex", ("model.safetensors", MIMI_FILE)),
                        ("some-llm", ("model.safetensors",))):
        snapshot = tmp_path / "hub" / f"models--someone--{repo}" / "snapshots" / "abc123"
        snapshot.mkdir(parents=True)
        for name in files:
            (snapshot / name).write_bytes(b"")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    w = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(w)
    combo = w.model_picker.combo
    qtbot.waitUntil(lambda: combo.findData("someone/tiny-duplex") >= 0, timeout=30_000)
    assert combo.itemText(combo.findData("someone/tiny-duplex")) == "someone/tiny-duplex"
    assert combo.itemText(combo.findData("someone/half-duplex")) == "someone/half-duplex (partly downloaded)"
    assert combo.itemText(combo.findData("kyutai/moshiko-pytorch-bf16")) == \
        "kyutai/moshiko-pytorch-bf16 (not downloaded)"
    assert combo.findData("someone/some-llm") < 0
    w.model_picker.select("someone/half-duplex")
    assert w.model_picker.action_button.text() == "Finish download" and w.model_picker.remove_button.isVisibleTo(w)
    w.model_picker.select("demo")
    assert w.model_picker.action_button.text() == "Load" and not w.model_picker.remove_button.isVisibleTo(w)


def test_choices_devices_and_geometry_persist(qtbot, tmp_path):
    settings = isolated_settings(tmp_path)
    first = MainWindow(settings, device="cpu")
    qtbot.addWidget(first)
    assert first.panel.chosen_options().demand_sized_state  # the fast path on a first start
    # This CPU machine shows the switch off already (it cannot honour it): the choice is
    # changed as a GPU machine's click would change it.
    first.panel.controls.demand_sized_state.setChecked(True)
    first.panel.controls.demand_sized_state.setChecked(False)
    first.record_box.setChecked(False)
    first.hint_bar.button.click()
    first.resize(first.width(), 687)
    first.close()
    second = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(second)
    assert not second.panel.chosen_options().demand_sized_state
    assert second.panel.chosen_options().graph_replay
    assert not second.record_box.isChecked()
    assert second.hint_bar.isHidden()
    assert second.height() == 687  # (the offscreen screen is too narrow to check widths)
    fresh = MainWindow(isolated_settings(tmp_path / "other"), device="cpu")
    qtbot.addWidget(fresh)
    assert not fresh.hint_bar.isHidden()  # first run: the headphones hint


def test_no_audio_device_at_all_is_explained(qtbot, window, demo_model):
    if audio_devices.list_devices("input"):
        pytest.skip("this machine has a microphone (CI containers have none)")
    assert window.device_picker.selected("input") is None
    assert not window.device_picker.microphone.isEnabled()
    window.models.set_model(demo_model)
    window.conversation.start()
    assert "No microphone found" in window.message_bar.text()
    assert not window.conversation.running and window.start_button.isEnabled()


def test_unhandled_exceptions_are_logged_and_reported(qtbot, tmp_path):
    from PyQt6.QtCore import QTimer

    from app.crash_reporting import CrashReporter, setup_logging
    log_path = setup_logging(tmp_path / "logs")
    reporter = CrashReporter(log_path)
    try:
        def broken_slot():
            raise RuntimeError("boom in a slot")
        with qtbot.waitSignal(reporter.reported, timeout=5000):
            QTimer.singleShot(0, broken_slot)
        qtbot.waitUntil(lambda: reporter.last_dialog is not None)
        dialog = reporter.last_dialog
        assert "RuntimeError: boom in a slot" in dialog.informativeText()
        assert str(log_path) in dialog.informativeText()
        assert "Traceback" not in dialog.informativeText()
        text = log_path.read_text()
        assert "Traceback" in text and "boom in a slot" in text
        import threading
        with qtbot.waitSignal(reporter.reported, timeout=5000):
            thread = threading.Thread(target=lambda: 1 / 0)
            thread.start()
            thread.join()
        assert "ZeroDivisionError" in log_path.read_text()
    finally:
        reporter.uninstall()
    assert os.path.getsize(log_path) > 0


def test_the_recordings_path_is_shown_and_copied(qtbot, window, demo_model):
    from PyQt6.QtWidgets import QApplication

    folder = str(window.settings.recordings_dir)
    assert folder in window.recording_label.text()
    window.copy_path_button.click()
    assert QApplication.clipboard().text() == folder
    window.models.set_model(demo_model)
    _run_file_conversation(qtbot, window, frames=3)
    assert "Recording to" in window.recording_label.text()  # shown while it is being written
    window.copy_path_button.click()
    assert QApplication.clipboard().text().endswith(".wav")
    _stop(qtbot, window)
    assert str(window.conversation.last_end.recording) in window.recording_label.text()


def test_the_recordings_folder_is_chosen_in_the_window_and_kept(qtbot, window, demo_model, tmp_path):
    chosen = tmp_path / "my recordings"
    window.set_recordings_folder("")  # a cancelled dialog changes nothing
    assert window.settings.recordings_dir != chosen
    window.set_recordings_folder(str(chosen))
    assert window.settings.recordings_dir == chosen and str(chosen) in window.recording_label.text()
    window.models.set_model(demo_model)
    _run_file_conversation(qtbot, window, frames=3)
    _stop(qtbot, window)
    assert window.conversation.last_end.recording.parent == chosen


def test_recordings_go_to_the_data_folder_without_the_doubled_name(tmp_path, monkeypatch):
    from PyQt6.QtCore import QSettings

    from app.app_settings import AppSettings
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert settings.recordings_dir == tmp_path / "data" / "DuplexCadence" / "recordings"
    doubled = tmp_path / "data" / "DuplexCadence" / "DuplexCadence" / "recordings"
    doubled.mkdir(parents=True)
    (doubled / "conversation_old.wav").write_bytes(b"")
    assert settings.recordings_dir == doubled  # an earlier version's recordings are still found



def test_the_demo_predictor_is_found_and_diffuplex_switches_live(qtbot, window, demo_model, tmp_path):
    from engine.families.moshi.diffuplex.predictor import new_predictor, save_predictor

    window.models.set_model(demo_model)
    controls = window.panel.controls
    adapter = tmp_path / "adapter.safetensors"
    save_predictor(new_predictor(demo_model.session.model.cfg, rank=2, block=3), adapter)
    with qtbot.waitSignal(window.models.predictor_signals.predictor, timeout=30_000):
        window.models.choose_predictor(str(adapter))
    assert controls.adapter_label.text() == "adapter.safetensors"
    assert controls.policy.model().item(2).isEnabled() and controls.block.isEnabled()
    controls.block.setValue(3)
    controls.tau.setValue(0.0)  # an untrained predictor: play whatever it predicts
    controls.policy.setCurrentIndex(2)  # SPEAK
    _run_file_conversation(qtbot, window, frames=30)
    qtbot.waitUntil(lambda: "guessed steps played per run" in window.panel.report_lines()[0], timeout=30_000)
    _stop(qtbot, window)
    stats = window.panel.tally
    # Untrained, it mispredicts the user: each planned frame fails verification and is revised.
    assert stats.frames > 0 and stats.revisions > 0 and "plans dropped" in window.panel.report_lines()[0]
    window.models.choose_predictor(str(tmp_path / "missing.safetensors"))
    qtbot.waitUntil(lambda: "missing.safetensors" in window.message_bar.text(), timeout=30_000)
    demo_model.session.load_predictor(None)


def test_the_picker_says_what_a_choice_needs_and_loads_int8(qtbot, window):
    picker = window.model_picker
    qtbot.waitUntil(lambda: "needs about" in picker.fit.text(), timeout=60_000)
    # On the CPU the float weights are float32.
    assert picker.fit.text().startswith("demo (untrained, PersonaPlex-shaped), float32 weights: needs about")
    picker.weights.setCurrentIndex(picker.weights.findData("int8"))
    qtbot.waitUntil(lambda: "int8 weights: needs about" in picker.fit.text(), timeout=60_000)
    assert window.settings.model_weights == "int8"
    with qtbot.waitSignal(window.models.signals.loaded, timeout=120_000):
        window.models.load()
    assert "Loaded demo" in picker.status.text()
    assert window.models.loaded.session.options.weights == "int8"
    assert "int8 weights: needs about" in picker.fit.text()


def test_a_model_that_does_not_fit_the_gpu_is_refused_before_loading(qtbot, window, monkeypatch):
    import dataclasses

    from engine.loading import models as model_loading

    # This machine has no GPU: the plan is the real one for the demo, with the free memory of a
    # GPU too small for it (the one stand-in here).
    real = model_loading.plan_memory
    monkeypatch.setattr(model_loading, "plan_memory", lambda *args: dataclasses.replace(
        real(*args), device="cuda:0", free_bytes=512 << 20))
    with qtbot.waitSignal(window.models.signals.failed, timeout=120_000):
        window.models.load()
    text = window.models.last_dialog.text()
    assert "bf16 weights: needs about 1.0 GiB" in text
    assert "512 MiB free on cuda:0: it does not fit. Choose int8" in text
    assert window.models.loaded is None


def test_start_is_enabled_while_a_model_is_loaded_and_nothing_loads(qtbot, window, demo_model, tmp_path):
    start = window.start_button
    assert not start.isEnabled() and "Load a model first" in start.toolTip()
    window.model_picker.select("demo")
    window.models.set_model(demo_model)
    assert start.isEnabled()
    window.models.busy_changed.emit(True)  # a predictor loading
    assert not start.isEnabled() and "finish loading" in start.toolTip()
    window.models.busy_changed.emit(False)
    assert start.isEnabled()


def test_switches_say_what_they_do_on_this_machine_before_a_model_loads(qtbot, window):
    controls = window.panel.controls
    for name in ("graph_replay", "demand_sized_state"):
        box = controls.toggles[name]
        assert not box.isEnabled() and not box.isChecked()  # a CPU machine never honours them
        assert box.toolTip().startswith("Unavailable on this machine:") and "CUDA" in box.toolTip()
        assert not controls.reasons[name].isHidden()
    assert window.panel.chosen_options().graph_replay  # the choice is kept, for a GPU machine


def test_the_engine_pane_starts_folded_and_is_remembered(qtbot, tmp_path):
    first = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(first)
    pane = first.panel.engine_pane
    assert not pane.is_expanded() and pane.body.isHidden()
    pane.header.click()
    assert pane.is_expanded() and not pane.body.isHidden()
    first.close()
    second = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(second)
    assert second.panel.engine_pane.is_expanded()
