"""Echo cancellation through a real acoustic loop on the private PulseAudio server: what the
model says is played into the virtual speaker, whose monitor is looped back (delayed 60 ms,
attenuated) into the virtual microphone, as a laptop's loudspeakers reach its microphone; the
user's speech (espeak-ng) is played into the microphone too. Real PortAudio streams, the real
WebRTC module. The figures are printed; the thresholds leave room for a loaded 2-core CI
machine and the loopback's rate adjustment (the issue's targets: 25 dB within 2 s). Its CPU
cost is printed too; the target (2 ms per 80 ms frame) is measured by bench/echo_cpu.py.

Before it, without sound devices: the canceller's own way into livekit's module processes
exactly as livekit's calls do, how the engine's polls cut the audio changes nothing, and the
resamplers' forecast lets the canceller run about once a frame without any frame coming later."""
import shutil
import subprocess
import time

import numpy as np
import pytest
import soxr

from app.audio import audio_devices
from app.audio.audio_io import ENGINE_RATE, AudioConfig, AudioLink, echo_batch_due
from app.audio.echo_cancel import APM_RATE, CHUNK, EchoCanceller, EchoSettings, ForecastStream, _Module, _module
from engine import FRAME_SIZE, SPEECH_SAMPLE, read_audio, split_frames
from tests.audio_fixture import virtual_audio  # noqa: F401  (a fixture)

LOOP_DELAY_MS, LOOP_VOLUME = 60, "60%"  # PulseAudio's cubic volume: about -13 dB
CONVERGED_S = 2.0
OFF = EchoSettings(echo_cancellation=False, noise_suppression=False, high_pass=False)
NEAR_TEXT = ("Hello there. I would like to know what the weather will be like tomorrow morning, "
             "and whether I should take an umbrella with me when I go out.")


@pytest.fixture(scope="module")
def room(virtual_audio):
    """The speaker's monitor looped into the microphone, delayed and attenuated."""
    module = virtual_audio.loop_speaker_into_microphone(LOOP_DELAY_MS, LOOP_VOLUME)
    yield virtual_audio
    virtual_audio.unload(module)


@pytest.fixture(scope="module")
def near_speech(tmp_path_factory):
    """The user's speech: espeak-ng's voice (a real recording's stand-in: a person speaking)."""
    if shutil.which("espeak-ng") is None:
        pytest.fail("the echo loop needs espeak-ng (Debian: espeak-ng)")
    wav = tmp_path_factory.mktemp("near") / "near.wav"
    subprocess.run(["espeak-ng", "-s", "150", "-w", str(wav), NEAR_TEXT], check=True)
    return wav


def _room(far: np.ndarray, rate: int) -> np.ndarray:
    """`far` as a microphone hears it: 60 ms later, 10 dB down, over a little noise."""
    delay = int(0.06 * rate)
    noise = np.random.default_rng(0).standard_normal(len(far)) * 1e-3
    return (np.concatenate([np.zeros(delay), far[:-delay]]) * 0.3 + noise).astype(np.float32)


def test_module_processes_exactly_as_livekits_calls():
    """The pre-serialised requests against livekit's AudioProcessingModule methods, fed the
    same far and near chunks: the same output, bit for bit, and echo really removed."""
    from livekit.rtc import AudioFrame
    far = soxr.resample(read_audio(SPEECH_SAMPLE), ENGINE_RATE, APM_RATE)[:4 * APM_RATE]
    far_pcm = np.round(far * 32767).astype(np.int16).reshape(-1, CHUNK)
    near_pcm = np.round(_room(far, APM_RATE) * 32767).astype(np.int16).reshape(-1, CHUNK)
    ours, theirs = _Module(EchoSettings()), _module(EchoSettings())
    ours.reserve(2)
    ours.module.set_stream_delay_ms(0)
    theirs.set_stream_delay_ms(0)
    outputs = []
    for far_chunk, near_chunk in zip(far_pcm, near_pcm):
        ours.pcm[0] = far_chunk
        ours.process_reverse_stream(0)
        theirs.process_reverse_stream(AudioFrame(far_chunk.tobytes(), APM_RATE, 1, CHUNK))
        ours.pcm[1] = near_chunk
        ours.process_stream(1)
        frame = AudioFrame(bytearray(near_chunk.tobytes()), APM_RATE, 1, CHUNK)
        theirs.process_stream(frame)
        assert np.array_equal(ours.pcm[1], np.frombuffer(frame.data, np.int16))
        outputs.append(ours.pcm[1].copy())
    settled = slice(2 * len(outputs) // 3, None)  # the last 1.3 s
    erle = 10 * np.log10(np.sum(np.square(near_pcm[settled], dtype=float))
                         / np.sum(np.square(outputs[settled], dtype=float)))
    assert erle > 10, f"the module removed only {erle:.1f} dB of echo"


def _cancel_in_blocks(far: np.ndarray, mic: np.ndarray, rate: int, played_block: int, mic_block: int) -> np.ndarray:
    """The canceller fed as the engine thread feeds it: the speaker ahead by 100 ms."""
    canceller = EchoCanceller(EchoSettings(), rate, rate)
    out, played = [], 0
    for start in range(0, len(mic), mic_block):
        while played < min(len(far), start + mic_block + rate // 10):
            canceller.add_played(far[played:played + played_block], 10.0)
            played += played_block
        out.append(canceller.process(mic[start:start + mic_block], 10.0))
    return np.concatenate(out)


def test_cancellation_does_not_depend_on_how_the_polls_cut_the_audio():
    """The callbacks' blocks (551 played, 661 microphone samples at 44.1 kHz) or whole 80 ms
    frames: the same audio in gives the same audio out, so the engine may call per frame."""
    rate = 44100
    far = read_audio(SPEECH_SAMPLE, rate)[:3 * rate]
    mic = _room(far, rate)
    polled = _cancel_in_blocks(far, mic, rate, 551, 661)
    framed = _cancel_in_blocks(far, mic, rate, 3528, 3528)
    n = min(len(polled), len(framed))
    assert n > 2.5 * APM_RATE
    assert np.array_equal(polled[:n], framed[:n])


@pytest.mark.parametrize("rates, step", [((44100, APM_RATE), 1), ((APM_RATE, ENGINE_RATE), CHUNK)])
def test_the_resamplers_forecast_never_falls_short(rates, step):
    """Whatever a soxr stream holds and however much comes next, it brings out no more than its
    forecast; once learnt, the forecast rules out nearly every call that brings out nothing."""
    stream, rng = ForecastStream(*rates), np.random.default_rng(1)
    idle = ruled_out = 0
    for call in range(2000):
        n = step * int(rng.integers(0, 2000 // step + 1))
        forecast = stream.most(n)
        out = stream.resample_chunk((rng.standard_normal(n) * 0.1).astype(np.float32))
        assert len(out) <= forecast, f"call {call}: {len(out)} out, {forecast} forecast"
        if call >= 100 and not len(out):
            idle, ruled_out = idle + 1, ruled_out + (forecast == 0)
    assert ruled_out >= 0.9 * idle


def _frames_by_poll(batched: bool, seconds: float = 4.0, rate: int = 44100) -> tuple[list[int], np.ndarray, int]:
    """The engine thread's polls every 4 ms, the callbacks' blocks arriving in real time (the
    speaker 100 ms ahead): the poll at which each 80 ms frame comes out, the frames, and how
    many times the canceller ran; either at every poll or when echo_batch_due says."""
    far = read_audio(SPEECH_SAMPLE, rate)[:int((seconds + 0.2) * rate)]
    mic = _room(far, rate)
    canceller, resampler = EchoCanceller(EchoSettings(), rate, rate), ForecastStream(APM_RATE, ENGINE_RATE)
    pending, frames, done, calls, played, given = np.zeros(0, np.float32), [], [], 0, 0, 0
    for poll in range(int(seconds / 0.004)):
        now = poll * 0.004
        arrived, playing = int(now * rate) // 661 * 661, int((now + 0.1) * rate) // 551 * 551
        if batched and not echo_batch_due(canceller, resampler, len(pending), arrived - given):
            continue
        canceller.add_played(far[played:playing], 10.0)
        if arrived > given:
            cleaned = canceller.process(mic[given:arrived], 10.0)
            pending = np.concatenate([pending, resampler.resample_chunk(cleaned)])
            calls += 1
        played, given = playing, arrived
        while len(pending) >= FRAME_SIZE:
            frames.append(pending[:FRAME_SIZE])
            pending = pending[FRAME_SIZE:]
            done.append(poll)
    return done, np.concatenate(frames), calls


def test_the_canceller_runs_about_once_a_frame_and_no_frame_comes_later():
    """Batched as AudioLink batches it, the canceller runs about once per frame (it ran twice
    or more when the resamplers' blocks were not forecast) and each frame comes out at the same
    poll, with the same samples, as with a call at every poll."""
    every_poll, every_frames, every_calls = _frames_by_poll(batched=False)
    batched, batched_frames, batched_calls = _frames_by_poll(batched=True)
    assert len(every_poll) >= 45
    assert batched == every_poll
    assert np.array_equal(batched_frames, every_frames)
    assert batched_calls <= 1.3 * len(batched), f"{batched_calls} calls for {len(batched)} frames"
    assert every_calls > 3 * len(every_poll)


def _talk(echo: EchoSettings, seconds: float, audio=None, near=None, near_at: float = 0.0, step_s: float = 0.0):
    """The model's speech (the bundled sample, on repeat) written at the frame cadence while the
    microphone's frames are read, as the engine thread does. Returns (what the model heard at
    24 kHz, the canceller's state at the end, when the near speech started, in the heard audio,
    the CPU time of read_frame per 80 ms frame in ms: the whole microphone path). `step_s`: a
    once-a-second model's step, this long at each second, during which the engine thread
    neither writes nor reads (then catches up, as the engine thread does)."""
    far = split_frames(read_audio(SPEECH_SAMPLE))
    link = AudioLink(audio_devices.list_devices("input")[0], audio_devices.list_devices("output")[0],
                     AudioConfig().for_step(1.0 if step_s else FRAME_SIZE / ENGINE_RATE), echo=echo)
    heard, written, player, near_sample, reading, stalls = [], 0, None, None, 0.0, 0
    link.start()
    started = time.monotonic()
    try:
        while (now := time.monotonic() - started) < seconds:
            if step_s and now >= stalls + 1:
                stalls += 1
                time.sleep(step_s)
                now = time.monotonic() - started
            while written * 0.08 <= now + 0.12:  # keep the speaker 120 ms ahead, as the engine does
                link.write_frame(far[written % len(far)])
                written += 1
            if near is not None and player is None and now >= near_at:
                player, near_sample = audio.play_into_microphone(near), sum(map(len, heard))
            while True:
                began = time.thread_time()
                frame = link.read_frame()
                reading += time.thread_time() - began
                if frame is None:
                    break
                heard.append(frame)
                link.echo_state()  # asked each frame, as the engine thread does (it latches "active")
            time.sleep(0.01)
        state = link.echo_state()
    finally:
        link.close()
        if player is not None:
            player.wait(timeout=30)
    return np.concatenate(heard), state, near_sample, 1000 * reading / max(1, len(heard))


def _energy_db(x: np.ndarray) -> float:
    return 10 * float(np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-12))


def _correlation_at_best_lag(clean: np.ndarray, heard: np.ndarray) -> float:
    """Pearson correlation of `clean` with the stretch of `heard` it lines up with best."""
    n = len(heard) + len(clean)
    xcorr = np.fft.irfft(np.fft.rfft(heard, n) * np.conj(np.fft.rfft(clean, n)), n)[:len(heard) - len(clean) + 1]
    energy = np.cumsum(np.concatenate([[0.0], np.square(heard, dtype=np.float64)]))
    norms = np.sqrt(np.maximum(energy[len(clean):] - energy[:-len(clean)], 1e-12)) * np.linalg.norm(clean)
    return float(np.max(xcorr / norms))


@pytest.mark.audio
@pytest.mark.parametrize("step_s", [0.0, 0.45], ids=["80ms-steps", "once-a-second"])
def test_echo_is_cancelled_and_the_users_speech_kept(room, near_speech, step_s):
    """Also for a once-a-second model (MiniCPM-o): its engine thread stalls 0.45 s a second on a
    step and then catches up, and it hears at 16 kHz, where the figures are taken."""
    skip = int(CONVERGED_S * ENGINE_RATE)
    echo_only, _, _, plain_cpu = _talk(OFF, 8.0, step_s=step_s)
    cancelled, state, _, echo_cpu = _talk(EchoSettings(), 8.0, step_s=step_s)
    heard, talk_state, at, _ = _talk(EchoSettings(), 14.0, room, near_speech, near_at=4.0, step_s=step_s)
    raw_heard = _talk(OFF, 14.0, room, near_speech, near_at=4.0, step_s=step_s)[0]
    clean, rate = read_audio(near_speech), ENGINE_RATE  # at the engine's rate
    if step_s:  # what the family hears: its input rate
        echo_only, cancelled, heard, raw_heard, clean = (
            soxr.resample(x, ENGINE_RATE, 16000) for x in (echo_only, cancelled, heard, raw_heard, clean))
        rate, skip, at = 16000, skip * 2 // 3, at * 2 // 3
    erle = _energy_db(echo_only[skip:]) - _energy_db(cancelled[skip:])
    kept = _correlation_at_best_lag(clean, heard[max(0, at - rate // 2):])
    raw_kept = _correlation_at_best_lag(clean, raw_heard)
    steps = "a 0.45 s step a second, at 16 kHz" if step_s else "80 ms steps"
    print(f"\necho loop ({LOOP_DELAY_MS} ms, {LOOP_VOLUME}, {steps}): echo {_energy_db(echo_only[skip:]):.1f} dBFS "
          f"without cancellation, {_energy_db(cancelled[skip:]):.1f} dBFS with it: ERLE {erle:.1f} dB after "
          f"{CONVERGED_S} s; "
          f"state {state.state} (its estimate {state.attenuation_db}); near speech kept in double talk: "
          f"correlation {kept:.2f} (without cancellation {raw_kept:.2f})\n"
          f"CPU per 80 ms frame: the canceller {state.ms_per_frame:.2f} ms (in double talk "
          f"{talk_state.ms_per_frame:.2f}); the whole microphone path (read_frame) {echo_cpu:.2f} ms with it, "
          f"{plain_cpu:.2f} ms without")
    assert _energy_db(echo_only[skip:]) > -45, "the loop carried no echo: the test measures nothing"
    assert erle >= 20
    assert state.state == "active"
    assert kept >= 0.5
    assert talk_state.ms_per_frame > 0  # measured (printed above); its target lives in bench/echo_cpu.py
