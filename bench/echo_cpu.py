"""CPU time of the microphone path's echo canceller (app/audio/echo_cancel.py) per 80 ms engine
frame, driven the way the live loop drives it.

The engine thread polls the audio rings every few milliseconds and sleeps between polls, so each
call starts with cold caches. Each mode (see MODES) replays that in real time and sums
time.thread_time() around every add_played / process call, per 80 ms of microphone audio. The
modes take turns ROUNDS times (the machine's other load moves single runs); the minimum and the
median go into the JSON, with each run's ERLE from 2 s on to show it really cancelled the echo.

    python3 -m bench.echo_cpu OUT.json [--seconds 8] [--rounds 3] [--rate 48000]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import soxr

from app.audio import echo_cancel
from app.audio.audio_io import ENGINE_RATE, echo_batch_due
from app.audio.echo_cancel import EchoCanceller, EchoSettings, ForecastStream
from engine import FRAME_SIZE

from .echo_options import make_signals

FRAME_S = 0.08
PLAYED_BLOCK_S = 0.0125  # what the speaker callback delivers each time here (600 samples at 48 kHz)
MIC_BLOCK_S = 0.0125  # the microphone callback's block, the same here
SPEAKER_LEAD_S = 0.1  # the speaker's callback runs this far ahead of what it plays
CONVERGED_S = 2.0
# poll_10ms: a poll every 10 ms, the canceller run only when AudioLink would run it (echo_batch_due), as
# tests/test_app_echo_loop.py drives it; poll_4ms: the same every 4 ms, as the conversation loop polls;
# every_poll_10ms: run at each poll that brought audio (what batching saves); per_frame: once per 80 ms
# with the whole frame; unpaced: back to back, caches warm (the processing alone).
MODES = {"poll_10ms": (0.010, True), "poll_4ms": (0.004, True), "every_poll_10ms": (0.010, False),
         "per_frame": (FRAME_S, False), "unpaced": (None, False)}  # (poll interval, batched as AudioLink)


def device_signals(rate: int, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """The far end and the microphone (echo + noise, no near speech) at the device rate."""
    signals = make_signals()
    far, mic = (soxr.resample(signals[name], 48000, rate) if rate != 48000 else signals[name]
                for name in ("far", "mic_echo_only"))
    n = int(seconds * rate)
    return far[:n].astype(np.float32), mic[:n].astype(np.float32)


def run_mode(poll_s: float | None, batched: bool, far: np.ndarray, mic: np.ndarray, rate: int) -> dict:
    """One replay; both streams' first samples at time 0 (the echo is 60 ms later in `mic`)."""
    canceller = EchoCanceller(EchoSettings(), rate, rate)
    resampler, pending = ForecastStream(echo_cancel.APM_RATE, ENGINE_RATE), 0  # to 24 kHz, as AudioLink
    played_block, mic_block = round(PLAYED_BLOCK_S * rate), round(MIC_BLOCK_S * rate)
    frame = round(FRAME_S * rate)
    played = given = 0
    cpu, calls, out = 0.0, 0, []
    started = time.perf_counter()
    while given < len(mic):
        if poll_s is None or poll_s >= FRAME_S:  # whole frames: what arrived by the frame's end
            mic_due = min(len(mic), given + frame)
            played_due = min(len(far), mic_due + round(SPEAKER_LEAD_S * rate))
        else:
            now = time.perf_counter() - started
            if now * rate > len(mic) + frame:  # the last frame's audio will not complete a frame
                break
            mic_due = min(len(mic), int(now * rate) // mic_block * mic_block)
            played_due = min(len(far), int((now + SPEAKER_LEAD_S) * rate) // played_block * played_block)
            if batched and not echo_batch_due(canceller, resampler, pending, mic_due - given):
                time.sleep(poll_s)
                continue
        began = time.thread_time()
        canceller.add_played(far[played:played_due], 0.0)
        if mic_due > given:
            out.append(canceller.process(mic[given:mic_due], 0.0))
            calls += 1
        cpu += time.thread_time() - began
        if mic_due > given:
            pending = (pending + len(resampler.resample_chunk(out[-1]))) % FRAME_SIZE
        played, given = played_due, mic_due
        if poll_s is not None:
            time.sleep(poll_s if poll_s < FRAME_S else max(0.0, started + given / rate - time.perf_counter()))
    out = np.concatenate(out)
    skip_in, skip_out = int(CONVERGED_S * rate), int(CONVERGED_S * echo_cancel.APM_RATE)
    erle = 10 * np.log10(np.mean(np.square(mic[skip_in:], dtype=np.float64))
                         / (np.mean(np.square(out[skip_out:], dtype=np.float64)) + 1e-20))
    frames = given / frame
    return {"ms_per_frame": 1000 * cpu / frames, "canceller_ms_per_frame": canceller.state().ms_per_frame,
            "calls_per_frame": calls / frames, "erle_db": float(erle)}


def measure(seconds: float, rounds: int, rate: int) -> dict:
    far, mic = device_signals(rate, seconds)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode, (poll_s, batched) in MODES.items():
            runs[mode].append(run_mode(poll_s, batched, far, mic, rate))
    summary = {}
    for mode, results in runs.items():
        cpu = [r["ms_per_frame"] for r in results]
        summary[mode] = {"ms_per_frame_min": round(min(cpu), 3), "ms_per_frame_median": round(float(np.median(cpu)), 3),
                         "ms_per_frame_runs": [round(c, 3) for c in cpu],
                         "canceller_ms_per_frame_runs": [round(r["canceller_ms_per_frame"], 3) for r in results],
                         "calls_per_frame": round(results[0]["calls_per_frame"], 2),
                         "erle_db_min": round(min(r["erle_db"] for r in results), 1)}
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--seconds", type=float, default=8.0, help="audio per run (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, taking turns (default 3)")
    parser.add_argument("--rate", type=int, default=48000,
                        help="the devices' rate (default 48000, app.audio.audio_devices.SERVER_RATE)")
    args = parser.parse_args(argv)
    source = Path(echo_cancel.__file__)
    load = os.getloadavg()
    modes = measure(args.seconds, args.rounds, args.rate)
    result = {
        "command": f"python3 -m bench.echo_cpu OUT.json --seconds {args.seconds:g} --rounds {args.rounds} "
                   f"--rate {args.rate}",
        "canceller": {"file": "app/audio/echo_cancel.py", "sha256": hashlib.sha256(source.read_bytes()).hexdigest()},
        "python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(), "load_average_1min_before": round(load[0], 2),
        "signals": "bench/echo_options.py's echo-only microphone and far end, at the device rate",
        "blocks_s": {"played": PLAYED_BLOCK_S, "microphone": MIC_BLOCK_S}, "speaker_lead_s": SPEAKER_LEAD_S,
        "metric": "time.thread_time() summed over add_played + process calls, per 80 ms of microphone audio",
        "modes": modes,
    }
    for mode, figures in modes.items():
        print(f"{mode:10s} {figures['ms_per_frame_min']:6.3f} ms per 80 ms frame (median "
              f"{figures['ms_per_frame_median']:.3f}; {figures['calls_per_frame']} calls per frame; "
              f"ERLE {figures['erle_db_min']} dB)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
