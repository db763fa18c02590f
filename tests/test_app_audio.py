"""AudioLink through real PortAudio streams on the private PulseAudio server."""
import time

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.audio import audio_devices
from app.audio.audio_devices import AudioDevice
from app.audio.audio_io import ENGINE_RATE, AudioConfig, AudioDeviceError, AudioLink
from app.audio.echo_cancel import EchoSettings
from tests.audio_fixture import (
    SINK_RATE,
    VirtualAudio,
    best_window_match,
    virtual_audio,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.audio
SPEECH = "assets/speech_sample.wav"


def _default(kind):
    devices = audio_devices.list_devices(kind)
    assert devices and devices[0].is_default, devices
    return devices[0]


def _pump(link, seconds, loop_back=True):
    """What the engine thread does, minus the engine: frames in, the same frames out."""
    frames, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert link.problem() is None
        frame = link.read_frame()
        if frame is None:
            time.sleep(0.004)
            continue
        frames.append(frame)
        if loop_back:
            link.write_frame(frame)
    return np.concatenate(frames) if frames else np.zeros(0, np.float32)


def test_speech_goes_round_through_real_streams(virtual_audio, tmp_path):
    microphone, speaker = _default("input"), _default("output")
    assert microphone.sample_rate != ENGINE_RATE  # so both resamplers really work
    speech, rate = sf.read(SPEECH, dtype="float32")
    speech = soxr.resample(speech, rate, ENGINE_RATE)[:3 * ENGINE_RATE]
    clip = tmp_path / "clip.wav"
    sf.write(clip, speech, ENGINE_RATE)
    # The raw path: echo cancellation (tests/test_app_echo_loop.py) would reshape the speech.
    link = AudioLink(microphone, speaker, echo=EchoSettings(echo_cancellation=False, high_pass=False))
    recording = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    link.start()
    player = virtual_audio.play_into_microphone(clip)
    heard = _pump(link, 4.5)
    link.close()
    player.wait(timeout=5)
    recording.terminate()
    recording.wait()
    assert len(heard) >= 3 * ENGINE_RATE
    assert best_window_match(heard, speech, ENGINE_RATE, window_s=1.0) > 0.95
    played, played_rate = sf.read(tmp_path / "speaker.wav", dtype="float32")
    assert played_rate == SINK_RATE
    sent = soxr.resample(speech, ENGINE_RATE, SINK_RATE)  # compared on the speaker's grid
    assert best_window_match(sent, played, SINK_RATE, window_s=1.0) > 0.95
    counters = link.counters()
    assert counters.input_overflows == 0 and counters.dropped_input_s == 0


def test_a_slow_engine_gets_bounded_latency(virtual_audio):
    config = AudioConfig(max_input_backlog_s=0.32)
    link = AudioLink(_default("input"), _default("output"), config)
    link.start()
    time.sleep(1.5)  # the engine is busy; the microphone keeps delivering
    assert link.read_frame() is not None
    counters = link.counters()
    link.close()
    assert counters.input_backlog_s <= 0.32
    assert counters.dropped_input_s > 0.5


def test_a_speaker_that_stops_is_reported(virtual_audio):
    config = AudioConfig(start_timeout_s=1.0, stall_timeout_s=0.5)
    link = AudioLink(_default("input"), _default("output"), config)
    link.start()
    try:
        _pump(link, 1.5)
        virtual_audio.suspend_speaker()
        deadline = time.monotonic() + 5
        while link.problem() is None and time.monotonic() < deadline:
            link.read_frame()
            time.sleep(0.01)
        assert "speaker stopped" in (link.problem() or "")
    finally:
        link.close()
        virtual_audio.pactl("suspend-sink", "dc_speaker", "0")


def test_a_vanished_sound_server_is_reported(tmp_path):
    audio = VirtualAudio(tmp_path)
    audio.start()
    try:
        link = AudioLink(_default("input"), _default("output"))
        link.start()
        _pump(link, 1.0)
        audio.server.kill()
        deadline = time.monotonic() + 5
        while link.problem() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "disconnected or failed" in (link.problem() or "")
        link.close()
    finally:
        audio.stop()


def test_a_device_gone_since_listing_is_a_clear_error(virtual_audio):
    gone = AudioDevice(index=999, name="USB headset", host_api="ALSA", sample_rate=48000,
                       is_default=False)
    with pytest.raises(AudioDeviceError, match="USB headset"):
        AudioLink(gone, _default("output"))
