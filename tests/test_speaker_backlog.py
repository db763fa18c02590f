"""After a stall the engine catches up faster than real time: its speech plays late, up to 2 s
behind, never lost; beyond that whole frames are skipped, counted, shown in the window and marked
in the recording, whose model channel holds what the speaker played. Real PortAudio streams on
the private PulseAudio server; what reached the virtual speaker is recorded from its monitor."""

import dataclasses
import json
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf
import soxr
from PyQt6.QtCore import Qt

from app.audio import audio_devices
from app.audio.audio_io import ENGINE_RATE, AudioConfig, AudioLink
from app.audio.echo_cancel import EchoSettings
from app.conversation.conversation_signals import ConversationSignals
from app.conversation.engine_thread import ConversationWorker
from app.conversation.recorder import ConversationRecorder
from app.window.main_window import MainWindow
from tests.app_helpers import isolated_settings, keep_torch_threads, load_demo  # noqa: F401
from tests.audio_fixture import (
    SINK_RATE,
    virtual_audio,  # noqa: F401  (a fixture)
)

pytestmark = pytest.mark.audio
FRAME = 1920
NO_ECHO = EchoSettings(echo_cancellation=False, noise_suppression=False, high_pass=False)
FOUND, ABSENT = 0.9, 0.5  # _Played.find of a frame of noise: itself ~1, unrelated noise ~0.1
DEMO_ABSENT = 0.8  # of a frame the demo model said: itself ~1, others of its speech up to ~0.7


def _default(kind):
    devices = audio_devices.list_devices(kind)
    assert devices and devices[0].is_default, devices
    return devices[0]


def _noise(count: int, seed: int) -> list[np.ndarray]:
    """Frames of noise, each its own, so each can be looked for where it was played."""
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal(FRAME)).astype(np.float32) for _ in range(count)]


def _feed(link: AudioLink, said: list[np.ndarray], stall_at: int, stall_s: float):
    """What the engine thread does, with `said` for the model: a frame out per microphone frame
    in, except that it stops for `stall_s` before frame `stall_at`, then catches up on what the
    microphone captured meanwhile. Returns write_frame's answers and the speaker queue's peak.
    (The stall comes at the first frame of speech: a frame before a stall is played in two
    parts, as the resampler holds its last milliseconds back until the next frame comes.)"""
    answers, peak, k = [], 0.0, 0
    while k < len(said):
        assert link.problem() is None
        if link.read_frame() is None:
            time.sleep(0.004)
            continue
        if k == stall_at:
            time.sleep(stall_s)
        answers.append(link.write_frame(said[k]))
        peak = max(peak, getattr(link.counters(), "output_backlog_s", 0.0))
        k += 1
    return answers, peak


def _heard(monitor) -> "_Played":
    """What reached the virtual speaker while `monitor` recorded it."""
    monitor.terminate()
    monitor.wait()
    audio, rate = sf.read(monitor.args[-1], dtype="float32")
    assert rate == SINK_RATE
    return _Played(audio)


def _on_speaker_grid(pcm: np.ndarray) -> np.ndarray:
    # At the speaker's rate the two line up on whole samples (a half-sample offset at 24 kHz
    # would blur a comparison).
    return soxr.resample(pcm, ENGINE_RATE, SINK_RATE)


class _Played:
    """Audio at the speaker's rate, below 8 kHz (where the resamplers on the way agree), to
    look for what the model said in."""

    def __init__(self, audio: np.ndarray, rate: int = SINK_RATE):
        self.raw = audio if rate == SINK_RATE else soxr.resample(audio, rate, SINK_RATE)
        self.audio = _low_pass(self.raw)
        self._energy = np.cumsum(np.concatenate([[0.0], np.square(self.audio, dtype=np.float64)]))
        self._spectra: dict[int, np.ndarray] = {}

    def find(self, pcm: np.ndarray) -> tuple[float, int]:
        """Where `pcm` (at the engine's rate) is found best: the normalised correlation there
        (1.0: unchanged; unrelated noise ~0.1) and its first sample's index."""
        segment = _low_pass(_on_speaker_grid(pcm))
        n = len(self.audio) + len(segment)
        if n not in self._spectra:
            self._spectra[n] = np.fft.rfft(self.audio, n)
        xcorr = np.fft.irfft(self._spectra[n] * np.conj(np.fft.rfft(segment, n)), n)
        xcorr = xcorr[:len(self.audio) - len(segment) + 1]
        norms = np.sqrt(np.maximum(self._energy[len(segment):] - self._energy[:-len(segment)], 1e-12))
        scores = np.abs(xcorr) / (norms * np.linalg.norm(segment) + 1e-12)
        at = int(np.argmax(scores))
        return float(scores[at]), at


def _found(frame: np.ndarray, where: _Played) -> float:
    return where.find(frame)[0]


def _same_audio(model: np.ndarray, heard: _Played, seconds: float = 0.25) -> float:
    """The share of the model channel's sounding stretches found unchanged in what the speaker
    received, in their order and place (a device's own glitch may shift what follows it by a
    few ms): 1.0 when the channel is what was played. A stretch where the virtual device played
    silence the link never wrote (an underrun that ALSA's pulse plugin recovers from without
    telling PortAudio, seen under load) is left out; at most two may be."""
    width = int(seconds * ENGINE_RATE)
    starts = [s for s in range(0, len(model) - width, width) if model[s:s + width].std() > 0.01]
    assert starts, "the model said nothing"
    found = [heard.find(model[s:s + width]) for s in starts]
    offsets = np.array([at - s * SINK_RATE // ENGINE_RATE for s, (_, at) in zip(starts, found)])
    shift = int(np.median(offsets))
    placed = np.abs(offsets - shift) < 0.05 * SINK_RATE
    glitches = [_has_silence(heard.raw[s * SINK_RATE // ENGINE_RATE + shift:][:width * SINK_RATE // ENGINE_RATE],
                             SINK_RATE) and not _has_silence(model[s:s + width], ENGINE_RATE) for s in starts]
    assert sum(glitches) <= 2, f"{sum(glitches)} stretches with silence the device added"
    return float(np.mean([score > 0.95 and ok
                          for (score, _), ok, glitch in zip(found, placed, glitches) if not glitch]))


def _has_silence(x: np.ndarray, rate: int, seconds: float = 0.005) -> bool:
    """Whether `x` holds `seconds` of silence in a row (what a device plays when it runs dry): below
    a 16-bit step, as the virtual speaker's samples are."""
    quiet = (np.abs(x) < 2.0 ** -15).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], quiet, [0]])))
    return bool(len(edges)) and int((edges[1::2] - edges[::2]).max()) >= seconds * rate


def _low_pass(x: np.ndarray, band_hz: float = 8000) -> np.ndarray:
    spectrum = np.fft.rfft(x)
    spectrum[np.fft.rfftfreq(len(x), 1 / SINK_RATE) > band_hz] = 0
    return np.fft.irfft(spectrum, len(x))


def _lag_s(user: np.ndarray, model: np.ndarray, start_s: float, seconds: float = 1.0) -> float:
    """How much later the model channel's audio from `start_s` on turns up in the user channel."""
    lo, hi = int(start_s * ENGINE_RATE), int((start_s + seconds) * ENGINE_RATE)
    segment, heard = model[lo:hi], user[lo:hi + ENGINE_RATE // 2]
    n = len(segment) + len(heard)
    xcorr = np.fft.irfft(np.fft.rfft(heard, n) * np.conj(np.fft.rfft(segment, n)), n)
    return int(np.argmax(xcorr[:ENGINE_RATE // 2])) / ENGINE_RATE


def _stalled(virtual_audio, tmp_path, config, speech, lead: int, tail: int, stall_s: float):
    """`speech` between `lead` and `tail` silent frames through a link whose engine stalls for
    `stall_s` where the speech begins: (the link, closed; each frame's skipped seconds; the
    backlog's peak; what the speaker received; the link's own log of what it played)."""
    silence = np.zeros(FRAME, np.float32)
    link = AudioLink(_default("input"), _default("output"), config, echo=NO_ECHO)
    monitor = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    link.start()
    try:
        answers, peak = _feed(link, [silence] * lead + speech + [silence] * tail, stall_at=lead, stall_s=stall_s)
        played = link.played_frames()
    finally:
        link.close()
    played = np.concatenate(played + link.played_frames(final=True))
    return link, answers, peak, _heard(monitor), played


def test_speech_up_to_two_seconds_late_plays_late_none_lost(virtual_audio, tmp_path):
    # The microphone keeps what comes during the stall, so the engine's catch-up brings 1.8 s
    # of speech to the speaker at once (by default it keeps 0.32 s).
    config = AudioConfig(max_input_backlog_s=2.5, input_capacity_s=3.0)
    speech = _noise(30, seed=1)
    link, _, _, heard, _ = _stalled(virtual_audio, tmp_path, config, speech, lead=15, tail=45, stall_s=1.8)
    assert link.counters().dropped_output_s == 0
    missing = [k for k, frame in enumerate(speech) if _found(frame, heard) < FOUND]
    assert missing == []


def test_speech_later_than_two_seconds_is_skipped_whole_and_counted(virtual_audio, tmp_path):
    config = AudioConfig(max_input_backlog_s=4.0, input_capacity_s=5.0)
    speech = _noise(45, seed=2)
    link, answers, peak, heard, played = _stalled(virtual_audio, tmp_path, config, speech, lead=10, tail=50,
                                                  stall_s=3.3)
    counters = link.counters()
    skipped = [k - 10 for k, answer in enumerate(answers) if answer]
    # Whole frames, counted: over 3 s late less the 2 s allowed (and the prebuffer).
    assert all(answer in (0.0, FRAME / ENGINE_RATE) for answer in answers), answers
    assert sum(answers) == pytest.approx(counters.dropped_output_s)
    assert 0.5 < counters.dropped_output_s < 1.4
    assert 2.0 < peak < 2.0 + config.prebuffer_s + 0.2
    assert skipped and all(0 <= k < len(speech) for k in skipped)
    # What was skipped never reached the speaker, the rest all did; the link's own log of
    # what it played (the recording's model channel) is what the speaker received.
    assert [k for k, f in enumerate(speech) if k not in skipped and _found(f, heard) < FOUND] == []
    assert [k for k in skipped if _found(speech[k], heard) > ABSENT] == []
    assert [k for k in skipped if _found(speech[k], _Played(played, ENGINE_RATE)) > ABSENT] == []
    assert _same_audio(played, heard) > 0.95
    # The pauses that followed were left out until the speaker was back on time.
    assert counters.output_backlog_s < config.prebuffer_s + 0.2  # and the frame just written


class _StallingSession:
    """The demo model's session, stopping for `seconds` before frame `at` (what a stall is: no
    part here stands in for the engine), keeping what the model said frame by frame. With
    `hold_at`, it also keeps Python's interpreter lock for 0.2 s there, as a busy engine thread
    can: the audio callbacks come late and the speaker runs dry at the device."""

    def __init__(self, session, at: int, seconds: float, hold_at: int | None = None):
        self._session, self._at, self._seconds, self._hold_at = session, at, seconds, hold_at
        self.said: list[np.ndarray] = []

    def __getattr__(self, name):
        return getattr(self._session, name)

    def step(self, pcm):
        if len(self.said) == self._at:
            time.sleep(self._seconds)
        if len(self.said) == self._hold_at:
            _hold_the_interpreter(0.2)
        out = self._session.step(pcm)
        self.said.append(out.pcm)
        return out


def _hold_the_interpreter(seconds: float) -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds)  # no other thread runs Python meanwhile
    try:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            pass
    finally:
        sys.setswitchinterval(interval)


@pytest.fixture(scope="module")
def demo_model(qapp):
    return load_demo()


def test_a_stalled_engine_is_heard_late_and_recorded_as_heard(qapp, demo_model, virtual_audio, tmp_path):
    """The speaker's sound reaches the microphone 60 ms later (echo cancellation off, so the
    recording's user channel keeps it): in the recording the user channel then follows the
    model channel by those 60 ms throughout, before the stall and after it, whatever the
    speaker's queue held, and after the device ran dry."""
    loop = virtual_audio.loop_speaker_into_microphone(60, "100%")
    monitor = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    session = _StallingSession(demo_model.session, at=30, seconds=1.6, hold_at=75)
    recorder = ConversationRecorder(tmp_path / "recordings", "demo", {})
    signals = ConversationSignals()
    reports, failures, done = [], [], threading.Event()
    signals.frame.connect(reports.append, Qt.ConnectionType.DirectConnection)
    signals.failed.connect(failures.append, Qt.ConnectionType.DirectConnection)
    signals.finished.connect(lambda _: done.set(), Qt.ConnectionType.DirectConnection)
    link = AudioLink(_default("input"), _default("output"),
                     AudioConfig(max_input_backlog_s=2.0, input_capacity_s=3.0), echo=NO_ECHO)
    worker = ConversationWorker(session, link, recorder, None, signals)
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while len(session.said) < 100 and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.05)
        worker.stop()
        assert done.wait(10)
    finally:
        virtual_audio.unload(loop)
    heard = _heard(monitor)
    assert failures == [] and len(reports) >= 100
    assert reports[-1].counters.dropped_output_s == 0
    assert max(r.counters.output_backlog_s for r in reports) > 1.0  # the catch-up played late
    assert reports[-1].counters.output_underflows >= 1
    audio, _ = sf.read(recorder.wav_path, dtype="float32")
    assert audio.shape == (len(reports) * FRAME, 2)
    user, model = audio[:, 0], audio[:, 1]
    assert _same_audio(model, heard) > 0.95
    spoken = [s for s in (1.0, 1.5, 5.0, 5.5, 6.5, 7.0) if model[int(s * ENGINE_RATE):][:ENGINE_RATE].std() > 0.01]
    # After the stall (2.4 s to 4.0 s of the recording) and after the device ran dry (6.0 s).
    assert {1.0, 1.5} & set(spoken) and {5.0, 5.5} & set(spoken) and {6.5, 7.0} & set(spoken), spoken
    lags = [_lag_s(user, model, s) for s in spoken]
    assert all(0.04 < lag < 0.12 for lag in lags), lags


def test_speech_skipped_is_shown_and_marked_in_the_recording(qtbot, tmp_path, demo_model, virtual_audio):
    # Skipping at 0.5 s late rather than 2 s: the demo model then needs only a short stall.
    config = AudioConfig(max_output_backlog_s=0.5, max_input_backlog_s=3.0, input_capacity_s=4.0,
                         start_timeout_s=2.0, stall_timeout_s=0.5)
    window = MainWindow(isolated_settings(tmp_path), device="cpu", audio_config=config)
    qtbot.addWidget(window)
    window.show()
    session = _StallingSession(demo_model.session, at=20, seconds=2.5)
    window.model_picker.select("demo")
    window.models.set_model(dataclasses.replace(demo_model, session=session))
    window.model_picker.voice.setCurrentText("No voice prompt")  # short prompts: fast start
    window.model_picker.role.setText("Hi.")
    monitor = virtual_audio.record_speaker(tmp_path / "speaker.wav")
    with qtbot.waitSignal(window.conversation.signals.started, timeout=60_000):
        window.conversation.start()
    qtbot.waitUntil(lambda: len(session.said) >= 90, timeout=90_000)
    # After the catch-up the queue hovers at its limit, skipping every other frame, until the model's
    # next pause is left out (frame 66-101 on this machine, as what it says varies): 15 frames unskipped.
    queue, last = window.conversation.worker.link._speaker_queue, [-1, 0]

    def settled() -> bool:
        if queue.dropped != last[0]:
            last[:] = [queue.dropped, len(session.said)]
        return len(session.said) - last[1] >= 15

    qtbot.waitUntil(settled, timeout=60_000)
    with qtbot.waitSignal(window.conversation.signals.finished, timeout=10_000):
        window.conversation.stop()
    heard = _heard(monitor)
    end = window.conversation.last_end
    record = json.loads(end.transcript.read_text())
    skips = record["speaker_skips"]
    skipped_s = record["speaker_skipped_s"]
    # In the window, where it is seen, and in the Engine details.
    assert window.message_bar.kind == "warning"
    assert f"{skipped_s:.2f} s of the model's speech was skipped" in window.message_bar.text()
    assert f"{skipped_s:.2f} s of speech skipped" in window.panel.audio_label.text()
    # In the recording: where (the model's frames, in its samples and seconds) and how much.
    assert skipped_s == pytest.approx(sum(skip["seconds"] for skip in skips)) and skipped_s > 0.3
    frames = []
    for skip in skips:
        assert skip["sample"] % FRAME == 0 and skip["t"] == round(skip["sample"] / ENGINE_RATE, 2)
        assert skip["seconds"] == pytest.approx(skip["frames"] * FRAME / ENGINE_RATE)
        assert skip["behind_s"] > config.max_output_backlog_s
        frames += range(skip["sample"] // FRAME, skip["sample"] // FRAME + skip["frames"])
    # During the catch-up after the stall (at frame 20; at 25 ms a frame it takes a few seconds),
    # and over once the engine kept up again.
    assert min(frames) >= 20 and max(frames) < len(session.said) - 10, frames
    # The model channel is what the speaker played: the skipped frames are not in it.
    audio, _ = sf.read(end.recording, dtype="float32")
    model = audio[:, 1]
    assert _same_audio(model, heard) > 0.95
    played = [k for k in range(min(frames), max(frames)) if k not in frames]
    channel = _Played(model, ENGINE_RATE)
    assert played and [k for k in played if _found(session.said[k], channel) < FOUND] == []
    assert [k for k in frames if _found(session.said[k], channel) > DEMO_ABSENT] == []
    assert [k for k in frames if _found(session.said[k], heard) > DEMO_ABSENT] == []


def test_skips_are_marked_one_entry_a_run(tmp_path):
    recorder = ConversationRecorder(tmp_path, "tiny", {})
    for frame in (40, 41, 42, 50):
        recorder.note_speaker_skip(frame, FRAME / ENGINE_RATE, 2.2)
    recorder.close()
    record = json.loads(recorder.json_path.read_text())
    assert record["speaker_skips"] == [
        {"t": 3.2, "sample": 40 * FRAME, "frames": 3, "seconds": 0.24, "behind_s": 2.2},
        {"t": 4.0, "sample": 50 * FRAME, "frames": 1, "seconds": 0.08, "behind_s": 2.2}]
    assert record["speaker_skipped_s"] == 0.32


def test_a_once_a_second_model_keeps_a_steps_stall_of_speech_queued():
    """A once-a-second model's step holds the engine thread for up to its second: the speaker
    keeps that much of the speech waiting (pauses in it are not left out to catch up), or the
    next step would empty the queue mid-speech. An 80 ms model's speaker catches up as before."""
    from app.audio.speaker_queue import SpeakerQueue
    assert AudioConfig().for_step(0.08) == AudioConfig()
    config = AudioConfig().for_step(1.0)
    assert config.step_stall_s == 1.0 and config.max_input_backlog_s == pytest.approx(1.32)
    every_frame = SpeakerQueue(ENGINE_RATE, config.prebuffer_s, config.max_output_backlog_s)
    once_a_second = SpeakerQueue(ENGINE_RATE, config.prebuffer_s, config.max_output_backlog_s, config.step_stall_s)
    speech = np.full(int(0.6 * ENGINE_RATE), 0.1, np.float32)
    for queue in (every_frame, once_a_second):
        queue.note_gap(0.08 + 1.0)  # a step's whole second
        queue.put(speech)
    assert every_frame.late() and not once_a_second.late()
    once_a_second.put(np.full(int(0.7 * ENGINE_RATE), 0.1, np.float32))  # 1.3 s: beyond a step's stall
    assert once_a_second.late() and not once_a_second.full()


def test_a_once_a_second_model_keeps_the_longest_recent_stall_queued_not_a_whole_step():
    """What waits beyond the prebuffer and a stall is latency a reply waits behind: the queue reckons
    the stalls from the gaps between written frames (steps of 0.3 s here), lets pauses go down to the
    longest lately (a longer one at the start forgotten), and raises it at once when a longer stall
    comes in the model's speech (one in a pause empties only silence); it never passes the step."""
    from app.audio.speaker_queue import SpeakerQueue
    config = AudioConfig().for_step(1.0)
    queue = SpeakerQueue(ENGINE_RATE, config.prebuffer_s, config.max_output_backlog_s, config.step_stall_s)
    queue.put(np.full(int(0.6 * ENGINE_RATE), 0.1, np.float32))
    assert queue.late()  # no stall seen yet
    queue.note_gap(0.08 + 1.0)  # the conversation's start (its prompts), say
    assert not queue.late()
    for _ in range(120):
        queue.note_gap(0.08 + 0.3)  # the step's frame
        for _caught_up in range(11):
            queue.note_gap(0.08 - 0.3 / 11)  # the frames that waited, caught up
    assert queue.recent_stall_s == pytest.approx(0.3, abs=0.02)  # decayed a little since the last
    assert queue.late()  # 0.6 s waits: more than 0.12 + 0.08 + 0.3
    queue.note_gap(0.08 + 0.55)
    assert queue.recent_stall_s == pytest.approx(0.55) and not queue.late()
    queue.note_gap(0.08 + 0.7, in_speech=False)  # in a pause: work between turns, a reply's first step
    assert queue.recent_stall_s < 0.55
    queue.note_gap(5.0)
    assert queue.recent_stall_s == 1.0
    every_frame = SpeakerQueue(ENGINE_RATE, config.prebuffer_s, config.max_output_backlog_s)
    every_frame.note_gap(0.5)
    assert every_frame.recent_stall_s == 0.0


@pytest.mark.parametrize("stall_at, reckoned", [(10, False), (15, True)])
def test_the_link_reckons_the_stalls_that_began_in_the_models_speech(virtual_audio, tmp_path, stall_at, reckoned):
    """Through real streams, a once-a-second model's step stalling the engine for 0.5 s: where it began
    in a pause (before the first frame of speech) the speaker only ran out of silence and the queue keeps
    no more for it; where it began in the speech, the queue keeps that much for the next one."""
    link = AudioLink(_default("input"), _default("output"), AudioConfig().for_step(1.0), echo=NO_ECHO)
    link.start()
    try:
        _feed(link, [np.zeros(FRAME, np.float32)] * 10 + _noise(20, seed=4), stall_at=stall_at, stall_s=0.5)
    finally:
        link.close()
    stall = link._speaker_queue.recent_stall_s
    assert 0.4 < stall < 0.6 if reckoned else stall < 0.1, stall
