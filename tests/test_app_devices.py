"""The Audio box's devices come from the private PulseAudio server: listed by description,
remembered by name, routed to for real, followed as they are plugged and unplugged (also
mid-conversation); and its switches (volume, mute, echo cancellation) remembered."""
import os
import threading
import time

import numpy as np
import pytest

from app.app_settings import AppSettings
from app.audio import audio_devices
from app.audio.audio_io import AudioConfig, AudioLink
from app.audio.device_choices import LOST
from app.audio.device_picker import METER_FLOOR_DB, DevicePicker
from app.audio.echo_cancel import APM_RATE, EchoSettings
from app.window.main_window import MainWindow
from tests.app_helpers import choose, combo_texts, isolated_settings
from tests.audio_fixture import (
    MIC_SINK,
    SPEAKER_SINK,
    VirtualAudio,
    virtual_audio,  # noqa: F401  (a fixture)
)

SINKS = {"dc_usb": "USB headset", "dc_hdmi": "HDMI monitor"}
SOURCES = {"dc_webcam": "Webcam microphone", "dc_headset_mic": "Headset microphone"}
EVENT_TIMEOUT_MS = 5000  # a server event reaches the picker in well under a second


@pytest.fixture(scope="module")
def plugged(virtual_audio):  # noqa: F811
    """The module's server with two more sinks and two more sources, as a person's desk has."""
    modules = [virtual_audio.add_sink(name, text) for name, text in SINKS.items()]
    modules += [virtual_audio.add_source(name, text) for name, text in SOURCES.items()]
    yield virtual_audio
    for module in modules:
        virtual_audio.unload(module)


@pytest.fixture
def picker(qtbot, tmp_path):
    p = DevicePicker(isolated_settings(tmp_path))
    qtbot.addWidget(p)
    return p


def _listed(combo) -> list:
    return [combo.itemData(i) for i in range(combo.count())]


def _pulse_index() -> int:
    return next(d["index"] for d in audio_devices.sd.query_devices() if d["name"] == "pulse")


@pytest.mark.audio
def test_the_pickers_list_the_servers_devices_by_description(plugged, picker):
    microphones = combo_texts(picker.microphone)
    # The default first (the fixture's microphone is a null sink's monitor), then the real
    # sources, then the other monitors; two sinks share "Null Output", so their names tell them apart.
    assert microphones[0] == f"Monitor of Null Output — {MIC_SINK}.monitor (system default)"
    assert microphones[1:3] == ["Webcam microphone", "Headset microphone"]
    assert set(microphones[3:]) == {f"Monitor of Null Output — {SPEAKER_SINK}.monitor",
                                    "Monitor of USB headset", "Monitor of HDMI monitor"}
    assert combo_texts(picker.speaker) == [f"Null Output — {SPEAKER_SINK} (system default)",
                                      f"Null Output — {MIC_SINK}", "USB headset", "HDMI monitor"]
    devices = audio_devices.list_devices("output")
    assert [d.key for d in devices] == [f"PulseAudio: {name}" for name in (SPEAKER_SINK, MIC_SINK, *SINKS)]
    assert {d.index for d in devices} == {_pulse_index()}  # all through PortAudio's pulse device
    assert picker.selected("input").is_default and picker.selected("output").is_default


@pytest.mark.audio
def test_a_new_default_is_marked_without_a_restart(plugged, picker, qtbot):
    plugged.pactl("set-default-sink", "dc_usb")
    try:
        qtbot.waitUntil(lambda: "USB headset (system default)" in combo_texts(picker.speaker), timeout=EVENT_TIMEOUT_MS)
        assert picker.selected("output").server_name == "dc_usb"  # nothing chosen: the default is
    finally:
        plugged.pactl("set-default-sink", SPEAKER_SINK)
    qtbot.waitUntil(lambda: picker.selected("output").server_name == SPEAKER_SINK, timeout=EVENT_TIMEOUT_MS)


@pytest.mark.audio
def test_a_choice_is_remembered_by_name(plugged, picker, qtbot, tmp_path):
    choose(picker.microphone, "Headset microphone")
    choose(picker.speaker, "USB headset")
    assert picker.settings.device_key("input") == "PulseAudio: dc_headset_mic"
    assert picker.settings.device_key("output") == "PulseAudio: dc_usb"
    again = DevicePicker(isolated_settings(tmp_path))  # the same settings file, read afresh
    qtbot.addWidget(again)
    assert again.selected("input").server_name == "dc_headset_mic"
    assert again.selected("output").server_name == "dc_usb"


@pytest.mark.audio
@pytest.mark.parametrize("kind, name", [("output", "dc_usb"), ("input", "dc_webcam")])
def test_a_stream_lands_on_the_chosen_device(plugged, kind, name):
    device = next(d for d in audio_devices.list_devices(kind) if d.server_name == name)
    variable = "PULSE_SINK" if kind == "output" else "PULSE_SOURCE"
    assert variable not in os.environ
    stream_type = audio_devices.sd.OutputStream if kind == "output" else audio_devices.sd.InputStream
    with audio_devices.opening(device):
        stream = stream_type(device=device.index, samplerate=device.sample_rate, channels=1, dtype="float32")
    assert variable not in os.environ  # routed for this stream only
    try:
        stream.start()
        on = plugged.stream_devices("sink" if kind == "output" else "source")
        assert name in on, on
    finally:
        stream.close()
    assert name not in plugged.stream_devices("sink" if kind == "output" else "source")


@pytest.mark.audio
def test_server_devices_open_at_the_echo_cancellers_rate(plugged):
    """The sound server's devices open at 48 kHz, the canceller's own rate, so it resamples
    neither the microphone nor the played audio (PortAudio's 44.1 kHz default for the plugin
    made it resample both)."""
    for kind in ("input", "output"):
        assert {d.sample_rate for d in audio_devices.list_devices(kind)} == {APM_RATE}


@pytest.mark.audio
def test_plugging_and_unplugging_show_without_a_restart(plugged, picker, qtbot):
    module = plugged.add_sink("dc_bluetooth", "Bluetooth speaker")
    try:
        qtbot.waitUntil(lambda: "Bluetooth speaker" in combo_texts(picker.speaker), timeout=EVENT_TIMEOUT_MS)
        assert "Monitor of Bluetooth speaker" in combo_texts(picker.microphone)
    finally:
        plugged.unload(module)
    qtbot.waitUntil(lambda: "Bluetooth speaker" not in combo_texts(picker.speaker), timeout=EVENT_TIMEOUT_MS)
    assert picker.selected("output").is_default


@pytest.mark.audio
def test_a_remembered_device_that_is_gone_gives_one_notice(plugged, qtbot, tmp_path):
    settings = isolated_settings(tmp_path)
    settings.set_device_key("output", "PulseAudio: dc_old")
    settings.set_device_label("output", "Old headset")
    notices = []
    picker = DevicePicker(settings)
    qtbot.addWidget(picker)
    picker.notice.connect(notices.append)
    assert picker.selected("output").is_default
    qtbot.waitUntil(lambda: bool(notices), timeout=2000)  # announced once the event loop runs
    assert notices == ["The speaker “Old headset” is not connected: using the system default until it is back."]
    # More listings, by hand and from server events, say nothing more.
    picker.refresh()
    module = plugged.add_sink("dc_other", "Other speaker")
    qtbot.waitUntil(lambda: "Other speaker" in combo_texts(picker.speaker), timeout=EVENT_TIMEOUT_MS)
    plugged.unload(module)
    qtbot.wait(300)
    assert len(notices) == 1
    assert settings.device_key("output") == "PulseAudio: dc_old"  # still the choice, for when it is back
    module = plugged.add_sink("dc_old", "Old headset")
    try:
        qtbot.waitUntil(lambda: picker.selected("output").server_name == "dc_old", timeout=EVENT_TIMEOUT_MS)
    finally:
        plugged.unload(module)
    qtbot.waitUntil(lambda: picker.selected("output").is_default, timeout=EVENT_TIMEOUT_MS)
    qtbot.waitUntil(lambda: len(notices) == 2, timeout=2000)  # gone again: news again
    assert notices[1] == notices[0]


@pytest.mark.audio
def test_a_choice_from_before_the_server_listing_is_no_missing_device(plugged, qtbot, tmp_path):
    """Versions that listed PortAudio's ALSA names remembered "ALSA: default" (the server's
    default): the default it is, without a word."""
    settings = isolated_settings(tmp_path)
    settings.set_device_key("input", "ALSA: default")
    picker = DevicePicker(settings)
    qtbot.addWidget(picker)
    with qtbot.assertNotEmitted(picker.notice, wait=300):
        pass
    assert picker.selected("input").is_default and picker.selected("input").server_name == f"{MIC_SINK}.monitor"


class _Engine(threading.Thread):
    """What the conversation's engine thread does with an AudioLink, minus the model: takes
    the microphone's frames and plays a tone, noting any problem the link reports."""

    def __init__(self, link: AudioLink):
        super().__init__(daemon=True)
        self.link, self.frames, self.problems = link, 0, []
        self._done = threading.Event()
        tone = 0.1 * np.sin(2 * np.pi * 440 * np.arange(1920) / 24000)
        self._tone = tone.astype(np.float32)

    def run(self) -> None:
        try:
            while not self._done.is_set():
                problem = self.link.problem()
                if problem:
                    self.problems.append(problem)
                if self.link.read_frame() is None:
                    time.sleep(0.004)
                    continue
                self.frames += 1
                self.link.write_frame(self._tone)
        except Exception as exc:  # shown by the test's assertions, not lost in a thread
            self.problems.append(repr(exc))

    def stop(self) -> None:
        self._done.set()
        self.join(5)


@pytest.mark.audio
def test_unplugging_the_speaker_in_use_mid_conversation(plugged, picker, qtbot):
    module = plugged.add_sink("dc_desk", "Desk speakers")
    qtbot.waitUntil(lambda: "Desk speakers" in combo_texts(picker.speaker), timeout=EVENT_TIMEOUT_MS)
    choose(picker.speaker, "Desk speakers")
    # Echo cancellation is not what this is about (its own tests cover it): off, so that only
    # the streams and their routing are exercised.
    link = AudioLink(picker.selected("input"), picker.selected("output"), AudioConfig(stall_timeout_s=0.5),
                     echo=EchoSettings(echo_cancellation=False, noise_suppression=False, high_pass=False))
    engine = _Engine(link)
    notices, lost = [], []
    picker.notice.connect(notices.append)
    picker.device_lost.connect(lost.append)
    try:
        link.start()
        engine.start()
        picker.set_running(True)
        qtbot.waitUntil(lambda: engine.frames >= 10 or bool(engine.problems), timeout=10_000)
        assert engine.problems == []
        assert "dc_desk" in plugged.stream_devices("sink")
        with qtbot.waitSignal(picker.device_lost, timeout=EVENT_TIMEOUT_MS):
            plugged.unload(module)
        assert lost == [LOST["output"].format(name="Desk speakers")] and "pick another speaker" in lost[0]
        # The server moved the stream to the default speaker, and it plays on there (PortAudio
        # was not re-initialised under it: that would have stopped it).
        frames = engine.frames
        qtbot.wait(1500)
        assert engine.frames >= frames + 10 and engine.problems == []
        assert plugged.stream_devices("sink").count(SPEAKER_SINK) == 2  # the fixture's keeper and ours
        assert picker.speaker.currentText() == "Desk speakers (unplugged)" and picker.speaker.isEnabled()
    finally:
        engine.stop()
        link.close()
        picker.set_running(False)
    assert lost and len(lost) == 1
    qtbot.wait(100)
    assert notices == []  # told already, when it was unplugged
    assert picker.selected("output").is_default and picker.speaker.isEnabled()


@pytest.mark.audio
def test_a_sound_server_going_away_is_no_unplugging(qtbot, tmp_path):
    """When the server itself dies the lists fall back to PortAudio's; the conversation's
    streams report the failure, not the picker."""
    audio = VirtualAudio(tmp_path / "pulse")
    audio.start()
    try:
        picker = DevicePicker(isolated_settings(tmp_path))
        qtbot.addWidget(picker)
        assert audio_devices.server_listed(_listed(picker.speaker))
        lost = []
        picker.device_lost.connect(lost.append)
        picker.set_running(True)
        audio.server.kill()
        qtbot.waitUntil(lambda: not audio_devices.server_listed(_listed(picker.speaker)),
                        timeout=EVENT_TIMEOUT_MS)
        assert lost == [] and "pulse" in combo_texts(picker.speaker)
        picker.set_running(False)
    finally:
        audio.stop()


# --- the switches, remembered (no sound server needed) -------------------------------------
def test_fresh_settings_give_the_defaults(picker):
    assert picker.speaker_volume() == 1.0 and picker.volume_label.text() == "100 %"
    assert not picker.is_speaker_muted() and not picker.is_muted()
    assert picker.echo_settings() == EchoSettings()  # echo cancellation and high-pass on, noise suppression off
    assert picker.echo_cancellation.isChecked() and picker.high_pass.isChecked()
    assert not picker.noise_suppression.isChecked()
    assert "without headphones" in picker.echo_cancellation.toolTip()


def test_volume_mute_and_echo_switches_round_trip(qtbot, tmp_path):
    first = DevicePicker(isolated_settings(tmp_path))
    qtbot.addWidget(first)
    with qtbot.waitSignal(first.volume_changed) as volume:
        first.volume.setValue(35)
    assert volume.args == [pytest.approx(0.35)] and first.volume_label.text() == "35 %"
    with qtbot.waitSignal(first.speaker_muted_changed) as muted:
        first.speaker_mute.click()
    assert muted.args == [True] and first.is_speaker_muted()
    changes = []
    first.echo_changed.connect(changes.append)
    first.echo_cancellation.click()
    first.noise_suppression.click()
    first.high_pass.click()
    wanted = EchoSettings(echo_cancellation=False, noise_suppression=True, high_pass=False, auto_gain=False)
    assert changes[-1] == wanted and len(changes) == 3
    assert changes[0] == EchoSettings(echo_cancellation=False)
    first.set_muted(True)  # the microphone's mute is not remembered (as before)
    second = DevicePicker(isolated_settings(tmp_path))  # the settings file, read afresh
    qtbot.addWidget(second)
    assert second.volume.value() == 35 and second.speaker_volume() == pytest.approx(0.35)
    assert second.is_speaker_muted() and not second.is_muted()
    assert second.echo_settings() == wanted
    assert not second.echo_cancellation.isChecked() and second.noise_suppression.isChecked()
    settings = AppSettings(second.settings.q)
    assert settings.speaker_volume == pytest.approx(0.35) and settings.speaker_muted
    assert settings.echo_settings == wanted


def test_settings_edited_by_hand_fall_back(tmp_path):
    settings = isolated_settings(tmp_path)
    settings.q.setValue("audio/speaker_volume", "loud")
    assert settings.speaker_volume == 1.0
    settings.speaker_volume = 3.0
    assert settings.speaker_volume == 1.0
    settings.speaker_volume = -1
    assert settings.speaker_volume == 0.0


def test_meters_and_echo_state(picker):
    picker.set_level(-12.5)
    picker.set_output_level(-80)
    assert picker.meter.value() == -12 and picker.output_meter.value() == METER_FLOOR_DB
    picker.set_output_level(3.0)
    assert picker.output_meter.value() == 0
    picker.set_echo_state("converging")
    assert picker.echo_state.text() == "converging"
    picker.set_running(True)
    picker.set_running(False)
    assert picker.meter.value() == METER_FLOOR_DB and picker.output_meter.value() == METER_FLOOR_DB


def test_the_window_still_fits_1280_by_720(qtbot, tmp_path):
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    needs = window.minimumSizeHint()
    assert needs.width() <= 1280 and needs.height() <= 720, needs
    # No taller than the model box beside it: the conversation area below keeps its room.
    assert window.device_picker.sizeHint().height() <= window.model_picker.sizeHint().height()
