"""Echo-cancellation libraries compared on the same synthetic signals, to choose one for the app's
microphone path (app/audio/echo_cancel.py: 10 ms frames, 48 kHz, int16 mono).

The far end is the bundled speech through a 3-tap room, delayed and attenuated, with a little
noise; the near speech is the same file reversed, present only in the double-talk half. Measured
per library: ERLE after convergence and the time to 20 dB (echo only), how well near speech is
kept in double talk (correlation against the clean near speech and against the library's own
output for near speech alone), and CPU per second of audio. `evaluate` and `cpu_cost` say exactly how.
Unless --no-wheels is given it also asks pip which platforms each package has wheels for.

    python3 -m bench.echo_options OUT.json [--no-wheels]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .echo_metrics import (
    ABOVE_NOISE_DB,
    CONVERGED_FROM_S,
    DOUBLE_TALK_FROM_S,
    FRAME,
    MAX_LAG_MS,
    NOISE_DBFS,
    RATE,
    SECONDS,
    TARGET_ERLE_DB,
    WINDOW_S,
    converged_erle_db,
    erle_db,
    near_preservation,
    time_to_erle_s,
)
from .echo_wheels import PACKAGES, packaging_facts, wheel_summary

ECHO_DELAY_MS = 60
ROOM_TAPS = ((0, 0.6), (7, 0.3), (19, 0.15))  # (ms, gain)
ECHO_GAIN_DB = -6.0
DELAY_HINTS_MS = (0, 10, 60)
CPU_ROUNDS = 7
SPEEX_FILTER_MS = 200  # the Speex adaptive filter's length: covers 60 + 19 ms of echo path with any hint
SPEECH = Path(__file__).resolve().parent.parent / "assets" / "speech_sample.wav"


def load_far_end() -> np.ndarray:
    """The speech sample at RATE, float64, repeated to SECONDS."""
    import soundfile
    import soxr
    speech, rate = soundfile.read(SPEECH, dtype="float64", always_2d=False)
    if speech.ndim > 1:
        speech = speech.mean(axis=1)
    speech = soxr.resample(speech, rate, RATE)
    total = int(SECONDS * RATE)
    return np.tile(speech, total // len(speech) + 1)[:total]


def room_echo(far: np.ndarray) -> np.ndarray:
    """The far end as the microphone hears it: delayed, through the room's taps, attenuated."""
    impulse = np.zeros(int((ECHO_DELAY_MS + ROOM_TAPS[-1][0]) * RATE / 1000) + 1)
    for tap_ms, gain in ROOM_TAPS:
        impulse[int((ECHO_DELAY_MS + tap_ms) * RATE / 1000)] += gain
    return np.convolve(far, impulse)[:len(far)] * 10 ** (ECHO_GAIN_DB / 20)


def near_speech(echo: np.ndarray) -> np.ndarray:
    """The speech file reversed in time (tiled the same way), at the echo's RMS, in the second half only."""
    reversed_speech = load_far_end()[::-1].copy()
    reversed_speech *= np.sqrt(np.mean(echo ** 2) / np.mean(reversed_speech ** 2))
    reversed_speech[:int(DOUBLE_TALK_FROM_S * RATE)] = 0.0
    return reversed_speech


def make_signals() -> dict[str, np.ndarray]:
    far = load_far_end()
    echo = room_echo(far)
    noise = np.random.default_rng(0).standard_normal(len(far)) * 10 ** (NOISE_DBFS / 20)
    near = near_speech(echo)
    return {"far": far, "echo": echo, "noise": noise, "near": near,
            "mic_echo_only": echo + noise, "mic_double_talk": echo + noise + near, "mic_near_only": near + noise}


def to_int16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)


def frames_of(samples: np.ndarray) -> list[bytes]:
    pcm = to_int16(samples)
    return [pcm[i:i + FRAME].tobytes() for i in range(0, len(pcm) - FRAME + 1, FRAME)]


class LivekitCanceller:
    """livekit.rtc.AudioProcessingModule as the app drives it."""
    label = "livekit (AEC3 + HPF, the app's settings)"
    package = "livekit"

    def __init__(self, delay_ms: int, high_pass: bool = True):
        from livekit.rtc import AudioFrame, AudioProcessingModule
        self._frame = AudioFrame
        self._delay = delay_ms
        self._apm = AudioProcessingModule(echo_cancellation=True, high_pass_filter=high_pass,
                                          noise_suppression=False, auto_gain_control=False)

    def process(self, far: bytes, near: bytes) -> bytes:
        self._apm.process_reverse_stream(self._frame(far, RATE, 1, FRAME))
        self._apm.set_stream_delay_ms(self._delay)
        frame = self._frame(near, RATE, 1, FRAME)
        self._apm.process_stream(frame)  # in place
        return bytes(frame.data)


class LivekitNoHighPassCanceller(LivekitCanceller):
    """The same module with high_pass_filter=False: a control for the aec_audio_processing row (which
    has no such switch). WebRTC enforces its high-pass filter while AEC3 runs, so the flag may not matter."""
    label = "livekit (AEC3, high_pass_filter=False; control)"

    def __init__(self, delay_ms: int):
        super().__init__(delay_ms, high_pass=False)


class AecAudioProcessingCanceller:
    """aec_audio_processing.AudioProcessor with only its echo canceller on (it has no high-pass switch)."""
    label = "aec_audio_processing (AEC3)"
    package = "aec_audio_processing"

    def __init__(self, delay_ms: int):
        from aec_audio_processing import AudioProcessor
        self._delay = delay_ms
        self._ap = AudioProcessor(enable_aec=True, enable_ns=False, enable_agc=False, enable_vad=False)
        self._ap.set_stream_format(RATE, 1)
        self._ap.set_reverse_stream_format(RATE, 1)

    def process(self, far: bytes, near: bytes) -> bytes:
        self._ap.process_reverse_stream(far)
        self._ap.set_stream_delay(self._delay)
        return self._ap.process_stream(near)


class SpeexCanceller:
    """speexdsp.EchoCanceller (Speex MDF): no delay input, so the hint delays the far reference."""
    label = f"speexdsp (MDF, {SPEEX_FILTER_MS} ms filter)"
    package = "speexdsp"

    def __init__(self, delay_ms: int):
        from speexdsp import EchoCanceller
        self._ec = EchoCanceller.create(FRAME, SPEEX_FILTER_MS * RATE // 1000, RATE)
        self._held = [bytes(2 * FRAME)] * (delay_ms // 10)  # far frames not yet given, oldest first

    def process(self, far: bytes, near: bytes) -> bytes:
        self._held.append(far)
        return self._ec.process(near, self._held.pop(0))


CANCELLERS = (LivekitCanceller, LivekitNoHighPassCanceller, AecAudioProcessingCanceller, SpeexCanceller)


def run_canceller(cls, delay_ms: int, far: list[bytes], mic: list[bytes]) -> tuple[np.ndarray, float]:
    """The output (float64) and the CPU seconds spent in the library for the whole signal."""
    canceller = cls(delay_ms)
    out = []
    cpu = 0.0
    for far_frame, mic_frame in zip(far, mic):
        started = time.process_time()
        processed = canceller.process(far_frame, mic_frame)
        cpu += time.process_time() - started
        out.append(processed)
    return np.frombuffer(b"".join(out), dtype=np.int16).astype(np.float64) / 32767.0, cpu


def library_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(PACKAGES[package])
    except importlib.metadata.PackageNotFoundError:
        return None


def evaluate(cls, signals: dict[str, np.ndarray], frames: dict[str, list[bytes]]) -> dict:
    """Scenario (a) with each delay hint, then (b) with the best hint, then the near speech alone
    (far end silent) through the same library: the reference that leaves out what the library does
    to speech anyway (its high-pass filter's phase, its latency), so only double talk's harm is left."""
    mic_a = signals["mic_echo_only"]
    per_hint = {}
    for hint in DELAY_HINTS_MS:
        out, cpu = run_canceller(cls, hint, frames["far"], frames["mic_echo_only"])
        reach = time_to_erle_s(mic_a, out)
        per_hint[hint] = {"erle_db": round(converged_erle_db(mic_a, out), 2), "time_to_20db_s": reach["first"],
                          "20db_held_from_s": reach["held"], "cpu_ms_per_s": round(1000 * cpu / (len(out) / RATE), 2)}
    best_hint = max(DELAY_HINTS_MS, key=lambda h: (per_hint[h]["erle_db"], -(per_hint[h]["time_to_20db_s"] or 1e9)))
    out_b, _ = run_canceller(cls, best_hint, frames["far"], frames["mic_double_talk"])
    clean_pass, _ = run_canceller(cls, best_hint, frames["silence"], frames["mic_near_only"])
    double_talk = near_preservation(out_b, signals["near"])
    own = near_preservation(out_b, np.concatenate([clean_pass, np.zeros(len(signals["near"]) - len(clean_pass))]))
    double_talk["pearson_vs_own_clean_pass"] = own["pearson"]
    double_talk["clean_pass_pearson"] = near_preservation(clean_pass, signals["near"])["pearson"]
    settled = slice(int(CONVERGED_FROM_S * RATE), int(DOUBLE_TALK_FROM_S * RATE))
    double_talk["erle_before_double_talk_db"] = round(erle_db(signals["mic_double_talk"][settled], out_b[settled]), 2)
    return {"label": cls.label, "package": PACKAGES[cls.package], "version": library_version(cls.package),
            "best_delay_hint_ms": best_hint, **per_hint[best_hint], "double_talk": double_talk,
            "per_delay_hint": {str(h): v for h, v in per_hint.items()}}


def passthrough(signals: dict[str, np.ndarray]) -> dict:
    """No processing: the baseline for the double-talk correlation (the echo alone limits it)."""
    mic_a, mic_b = signals["mic_echo_only"], signals["mic_double_talk"]
    return {"label": "no processing (microphone as is)", "package": None, "version": None, "best_delay_hint_ms": None,
            "erle_db": round(converged_erle_db(mic_a, mic_a), 2), "time_to_20db_s": None, "20db_held_from_s": None,
            "cpu_ms_per_s": 0.0, "double_talk": {**near_preservation(mic_b, signals["near"]),
                                                 "pearson_vs_own_clean_pass": None, "clean_pass_pearson": None}}


def cpu_cost(rows: list[dict], classes: list, frames: dict[str, list[bytes]]) -> None:
    """CPU per second of audio, measured apart: CPU_ROUNDS rounds of scenario (a) at each library's
    best hint, the libraries taking turns within a round so that a busy spell of the machine falls
    on all of them; the minimum (the least disturbed run) and the median, into each row."""
    runs: dict[str, list[float]] = {cls.label: [] for cls in classes}
    hints = {row["label"]: row["best_delay_hint_ms"] for row in rows}
    for _ in range(CPU_ROUNDS):
        for cls in classes:
            out, cpu = run_canceller(cls, hints[cls.label], frames["far"], frames["mic_echo_only"])
            runs[cls.label].append(1000 * cpu / (len(out) / RATE))
    for row in rows:
        row["cpu_ms_per_s"] = round(min(runs[row["label"]]), 2)
        row["cpu_ms_per_s_median"] = round(float(np.median(runs[row["label"]])), 2)
        row["cpu_ms_per_s_runs"] = [round(c, 2) for c in runs[row["label"]]]


def compare() -> tuple[list[dict], dict]:
    signals = make_signals()
    frames = {name: frames_of(signals[name]) for name in ("far", "mic_echo_only", "mic_double_talk", "mic_near_only")}
    frames["silence"] = [bytes(2 * FRAME)] * len(frames["far"])
    rows = [passthrough(signals)]
    unavailable = {}
    for cls in CANCELLERS:
        try:
            cls(0)
        except Exception as exc:  # not installed, or its native library does not load
            unavailable[cls.label] = f"{type(exc).__name__}: {exc}"
            continue
        rows.append(evaluate(cls, signals, frames))
        print(f"  measured {cls.label}", file=sys.stderr)
    cpu_cost(rows[1:], [cls for cls in CANCELLERS if cls.label not in unavailable], frames)
    levels = {name: round(float(10 * np.log10(np.mean(signals[name][s] ** 2))), 1) for name, s in
              (("far", slice(None)), ("echo", slice(None)), ("noise", slice(None)),
               ("near", slice(int(DOUBLE_TALK_FROM_S * RATE), None)))}
    return rows, {"unavailable": unavailable, "levels_dbfs": levels}


def markdown_table(rows: list[dict]) -> str:
    lines = ["| library | version | delay hint (ms) | ERLE from 2 s (dB) | first 20 dB window (s) "
             "| 20 dB held from (s) | double-talk r vs clean near (lag ms) | r vs own clean pass | near level (dB) "
             "| CPU (ms per s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def shown(value) -> str:
        return "-" if value is None else str(value)
    for row in rows:
        dt = row["double_talk"]
        cells = [row["label"], shown(row["version"]), shown(row["best_delay_hint_ms"]), f"{row['erle_db']:.1f}",
                 shown(row["time_to_20db_s"]), shown(row["20db_held_from_s"]),
                 f"{dt['pearson']:.3f} ({dt['lag_ms']:+.2f})", shown(dt["pearson_vs_own_clean_pass"]),
                 f"{dt['level_db']:+.1f}", f"{row['cpu_ms_per_s']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--no-wheels", action="store_true", help="skip asking pip about wheels")
    args = parser.parse_args(argv)

    rows, extra = compare()
    result = {
        "command": "python3 -m bench.echo_options OUT.json",
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "signals": {"rate": RATE, "frame_ms": 10, "seconds": SECONDS,
                    "far": "assets/speech_sample.wav, soxr to 48 kHz, repeated", "echo_delay_ms": ECHO_DELAY_MS,
                    "room_taps_ms_gain": ROOM_TAPS,
                    "echo_gain_db": ECHO_GAIN_DB, "noise_dbfs": NOISE_DBFS,
                    "near": "the same file reversed in time, at the echo's RMS, from 10 s on",
                    "levels_dbfs": extra["levels_dbfs"]},
        "metrics": {"erle": f"10*log10(mic energy / output energy) from {CONVERGED_FROM_S} s on, echo only",
                    "time_to_20db": f"end of the first {WINDOW_S} s window (10 ms hop) reaching {TARGET_ERLE_DB} dB, "
                                    f"windows with the mic {ABOVE_NOISE_DB} dB above the noise floor; held: from "
                                    "which window on every later one reaches it",
                    "double_talk": f"Pearson r of output vs clean near speech from {DOUBLE_TALK_FROM_S} s, best lag "
                                   f"within +-{MAX_LAG_MS} ms; level_db: output over near-speech energy there; "
                                   "pearson_vs_own_clean_pass: the same r against the library's output for the near "
                                   "speech alone (far end silent); clean_pass_pearson: that output's r vs clean near",
                    "cpu": "time.process_time() around the per-frame library calls (binding overhead included), "
                           f"ms per second of audio: the minimum (and median) of {CPU_ROUNDS} interleaved echo-only "
                           "runs at the best hint",
                    "delay_hint": f"best ERLE among {list(DELAY_HINTS_MS)} ms"},
        "results": rows,
        "unavailable": extra["unavailable"],
    }
    print(markdown_table(rows))
    for label, why in extra["unavailable"].items():
        print(f"\nunavailable: {label}: {why}")
    if not args.no_wheels:
        result["packaging"] = packaging_facts()
        print("\n| package | latest | wheels (platform: Python versions) |\n| --- | --- | --- |")
        for facts in result["packaging"].values():
            if "wheels" in facts:
                print(f"| {facts['package']} | {facts['latest']} | {wheel_summary(facts['wheels'], facts['latest'])} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
