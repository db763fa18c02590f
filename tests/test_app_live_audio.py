"""Whole conversations through real PortAudio streams on the private PulseAudio server:
speech played into the virtual microphone, the demo model answering into the virtual
speaker, the recording checked; and a speaker that fails mid conversation."""

import json

import pytest
import soundfile as sf
import soxr

from app.audio.audio_io import ENGINE_RATE, AudioConfig  # noqa: E402
from tests.app_helpers import demo_window, keep_torch_threads, load_demo  # noqa: F401
from tests.audio_fixture import (
    SINK_RATE,
    SPEAKER_SINK,
    best_window_match,
    virtual_audio,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.audio
SPEECH = "assets/speech_sample.wav"


@pytest.fixture(scope="module")
def demo_model(qapp):
    return load_demo()


@pytest.fixture
def window(qtbot, tmp_path, demo_model, virtual_audio):
    w = demo_window(tmp_path, demo_model, AudioConfig(start_timeout_s=2.0, stall_timeout_s=0.5))
    qtbot.addWidget(w)
    yield w
    w.close()


def _start(qtbot, window):
    assert window.device_picker.selected("input").is_default
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()


def _stop(qtbot, window):
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()


def test_a_conversation_through_virtual_devices(qtbot, window, virtual_audio, tmp_path):
    speech, rate = sf.read(SPEECH, dtype="float32")
    speech = soxr.resample(speech, rate, ENGINE_RATE)
    speaker = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    _start(qtbot, window)
    player = virtual_audio.play_into_microphone(SPEECH)
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 40, timeout=90_000)
    _stop(qtbot, window)
    player.terminate()
    speaker.terminate()
    speaker.wait()
    assert window.message_bar.text() == ""
    # Nothing of ours is left connected to the sound server (the fixture's own playing
    # streams are sink inputs; recorders are source outputs and all have ended).
    assert virtual_audio.pactl("list", "short", "source-outputs") == ""
    end = window.conversation.last_end
    audio, rate = sf.read(end.recording, dtype="float32")
    assert rate == ENGINE_RATE and audio.shape == (end.frames * 1920, 2)
    assert end.frames >= window.panel.stats.frames >= 40
    user, model = audio[:, 0], audio[:, 1]
    # The microphone channel carries the speech that was played (resampled twice), as the model
    # heard it: through echo cancellation, whose high-pass filter shifts the low band's phase.
    assert best_window_match(user, speech, ENGINE_RATE) > 0.8
    recorded = json.loads(end.transcript.read_text())
    assert recorded["audio_processing"]["echo_cancellation"] is True
    # The model spoke, and what it said reached the virtual speaker.
    assert model[len(model) // 2:].std() > 1e-3
    played, _ = sf.read(tmp_path / "speaker.wav", dtype="float32")
    # Compared at the speaker's rate, where the two line up on whole samples (at 24 kHz a
    # half-sample offset would blur the comparison). Stopping drops what was still queued
    # for the speaker (~0.2 s): look before that.
    said = soxr.resample(model[:-ENGINE_RATE // 2], ENGINE_RATE, SINK_RATE)
    assert best_window_match(said, played, SINK_RATE) > 0.9


def test_a_speaker_failing_mid_conversation(qtbot, window, virtual_audio):
    _start(qtbot, window)
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 10, timeout=30_000)
    try:
        with qtbot.waitSignal(window.conversation.signals.finished, timeout=30_000):
            virtual_audio.suspend_speaker()
    finally:
        virtual_audio.pactl("suspend-sink", SPEAKER_SINK, "0")
    assert "speaker stopped" in window.message_bar.text()
    end = window.conversation.last_end
    audio, _ = sf.read(end.recording, dtype="float32")
    assert audio.shape == (end.frames * 1920, 2) and end.frames >= 10
    # The app is still usable: a new conversation starts and runs.
    assert window.start_button.isEnabled()
    _start(qtbot, window)
    qtbot.waitUntil(lambda: window.panel.stats.frames >= 5, timeout=30_000)
    _stop(qtbot, window)
    assert window.conversation.last_end.frames >= 5
