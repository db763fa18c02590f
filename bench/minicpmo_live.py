"""`python3 -m bench.minicpmo_live`: MiniCPM-o 4.5 as the app runs it, live: the app's engine thread (echo
cancellation and the recorder on; barge-in off, as the thread starts, since the schedule's speech goes on while
the model speaks) and PortAudio streams on the private PulseAudio server (bench.virtual_audio), a file played
into its microphone, and bench.minicpmo's schedule of speaking and listening units forced as that bench
forces them. It reports what that bench reports of the units (speaking p50 / p99 / max, listening, the units
over the one-second cadence, the first included; a unit's time is that of the engine period it ran in) and
what the audio path saw: speech skipped, the speaker run dry, microphone audio lost. `--against`: a
bench.minicpmo JSON's speaking p99 beside ours. Full size (random weights written from the reference's code)
needs a CUDA GPU; `--folder` runs a checkpoint folder as it is, the tiny test one on the CPU included."""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .minicpmo_schedule import STAGES, TEXT, Forcing, schedule, summarize

STAGE_OF = {"encode": "encoder", "prefill": "llm_prefill", "decide": "llm_decode", "speech tokens": "tts",
            "audio": "tail", "finalize": "finalize"}
"""The family's stage marks (engine.families.minicpmo) under bench.minicpmo's stage names."""
INPUT_RATE = 16000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m bench.minicpmo_live",
                                     description="MiniCPM-o 4.5 live through the app's engine thread and PortAudio")
    parser.add_argument("--output", type=Path, required=True, help="the JSON report")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--reference", type=Path,
                        help="the reference's MiniCPMO45/ folder: full-size random weights are written from its code")
    source.add_argument("--folder", type=Path, help="a checkpoint folder in the official layout, run as it is")
    parser.add_argument("--seconds", type=int, default=240, help="units to run, one a second (default 240)")
    parser.add_argument("--weights", choices=["bf16", "int8", "int4"], help="as for the app's Weights box")
    parser.add_argument("--device", default="auto", help="as the app's --device (default: a GPU if there is one)")
    parser.add_argument("--against", type=Path, help="a bench.minicpmo JSON whose speaking p99 is set beside ours")
    parser.add_argument("--audio-bundle", type=Path,
                        help="the sound server's files where the machine has none (packaging/gpu_audio.sh)")
    parser.add_argument("--scratch", type=Path, help="where the full-size checkpoint is written (default: /tmp)")
    parser.add_argument("--seed", type=int, default=0, help="of the random weights (default 0)")
    return parser


class _Emitter:
    def __init__(self, on=None):
        self.values, self.on = [], on

    def emit(self, value=None) -> None:
        self.values.append(value)
        if self.on is not None:
            self.on(value)


class Signals:
    """What the engine thread says, kept (the window's ConversationSignals without Qt)."""

    def __init__(self):
        self.ready, self.done = threading.Event(), threading.Event()
        self.started, self.frame = _Emitter(lambda _: self.ready.set()), _Emitter()
        self.notice, self.warning, self.failed = _Emitter(print), _Emitter(print), _Emitter(print)
        self.finished = _Emitter(lambda _: self.done.set())


def run(args) -> dict:
    import torch

    from app.audio.audio_devices import list_devices
    from app.audio.audio_io import AudioConfig, AudioLink
    from app.audio.echo_cancel import EchoSettings
    from app.conversation.engine_thread import ConversationWorker
    from app.conversation.recorder import ConversationRecorder
    from engine import DuplexSession, Persona, limit_cpu_threads, load_model, select_device
    from engine.families.minicpmo.text_tokens import TextTokens

    from .minicpmo import unit_audio
    from .virtual_audio import VirtualAudio

    if args.seconds < 1:
        raise SystemExit("--seconds must be at least 1")
    device = select_device(args.device)
    if args.reference is not None and not device.startswith("cuda"):
        raise SystemExit("full-size weights need a CUDA GPU (torch sees none); --folder runs a small checkpoint")
    limit_cpu_threads(device)
    report: dict = {"bench": "minicpmo_live", "seconds": args.seconds, "weights": args.weights,
                    "torch": torch.__version__, "python": platform.python_version(),
                    "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"}
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        tmp = Path(tmp)
        folder = args.folder or _write_checkpoint(args, tmp, torch.device(device), report)
        began = time.perf_counter()
        model = load_model(folder, device=device, weights=args.weights)
        session = DuplexSession(model, persona=Persona())
        if device.startswith("cuda"):
            session.prepare()  # as the app's loader does
        report["ready_s"] = time.perf_counter() - began
        print(f"ready in {report['ready_s']:.1f} s on {report['device']}", flush=True)
        plan = schedule(args.seconds + 60)  # and the units that may run while it stops
        tokens = TextTokens(folder)
        forcing = Forcing(plan, tokens.id("<|listen|>"), tokens.id("<|turn_eos|>"), tokens.encode(TEXT))
        _force(session.conversation, forcing)
        microphone = tmp / "microphone.wav"
        _write_wav(microphone, np.concatenate(unit_audio(args.seconds + 10)))
        audio = VirtualAudio(tmp / "pulse", bundle=args.audio_bundle)
        audio.start()
        try:
            config = AudioConfig().for_step(model.step_samples / model.input_rate)  # as the app's window does
            link = AudioLink(list_devices("input")[0], list_devices("output")[0], config, echo=EchoSettings())
            recorder = ConversationRecorder(tmp / "recordings", model.name, {}, None)
            signals = Signals()
            worker = ConversationWorker(session, link, recorder, (None, session.default_role), signals)
            worker.start()
            if not signals.ready.wait(300):
                raise SystemExit(f"the conversation did not start: {signals.failed.values}")
            player = audio.play_into_microphone(microphone)
            deadline = time.monotonic() + args.seconds + 60
            while (_units(signals.frame.values) < args.seconds and time.monotonic() < deadline
                   and not signals.done.is_set()):
                time.sleep(0.2)
            worker.stop()
            signals.done.wait(60)
            player.terminate()
        finally:
            audio.stop()
            session.close()
    report.update(_results(signals, plan))
    if args.against is not None:
        bench = json.loads(args.against.read_text())["ours"]["summary"]["speaking"]["p99_ms"]
        live = report["summary"]["speaking"].get("p99_ms")
        report["against"] = {"file": str(args.against), "bench_speaking_p99_ms": bench,
                             "live_over_bench_p99": live / bench if live else None}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    _show(report)
    return report


def _write_checkpoint(args, tmp: Path, device, report: dict) -> Path:
    from .minicpmo_weights import write_checkpoint, write_tail

    folder = tmp / "MiniCPM-o-4_5"
    report["checkpoint"] = write_checkpoint(args.reference, folder, "full", device, args.seed)
    write_tail(folder, args.seed)
    return folder


def _force(conversation, forcing: Forcing) -> None:
    """The schedule's decisions, as bench.minicpmo forces them: a bias on the token each decode must draw,
    the unit counted at each of the conversation's steps, the unit's character cut lifted."""
    from .minicpmo_sides import MAX_CHARACTERS

    units = conversation.units
    units.settings = conversation.settings = dataclasses.replace(units.settings, max_unit_characters=MAX_CHARACTERS)
    units.decoder.decode = forcing.wrap(units.decoder.decode)
    step, count = conversation.step, iter(range(len(forcing.plan)))

    def counted(*args, **kwargs):
        forcing.begin(next(count))
        return step(*args, **kwargs)

    conversation.step = counted


def _write_wav(path: Path, pcm: np.ndarray) -> None:
    import soundfile as sf
    sf.write(path, pcm, INPUT_RATE, subtype="FLOAT")


def _units(reports) -> int:
    return sum(report.output.steps for report in list(reports))


def _results(signals: Signals, plan) -> dict:
    """Each unit's record as bench.minicpmo keeps it (its time: the period's), and the audio path's counts."""
    records, as_planned = [], 0
    for report in signals.frame.values:
        out = report.output
        if not out.steps:
            continue
        unit = len(records)
        stages = dict.fromkeys(STAGES, 0.0)
        for name, seconds in out.timings.items():
            if name != "total":
                stages[STAGE_OF.get(name, "other")] += seconds * 1000
        kind = plan[unit].kind
        as_planned += out.report is not None and out.report.listen == (kind != "speak")
        records.append({"unit": unit, "kind": kind, "frame": report.index, "ms": out.timings["total"] * 1000,
                        "stages": stages, "listen": out.report.listen if out.report is not None else None,
                        "speak_s": list(out.speak_s), "steps": out.steps})
    counters = signals.frame.values[-1].counters if signals.frame.values else None
    return {"units": records, "units_as_planned": as_planned, "summary": summarize(records),
            "frames": len(signals.frame.values), "failed": signals.failed.values, "warnings": signals.warning.values,
            "audio": None if counters is None else {
                "speech_skipped_s": counters.dropped_output_s, "speaker_ran_dry": counters.output_underflows,
                "microphone_lost_s": counters.dropped_input_s}}


def _show(report: dict) -> None:
    s = report["summary"]
    speak, listen = s["speaking"], s["listening"]
    print(f"units {len(report['units'])} ({report['units_as_planned']} as planned); speaking "
          f"{speak.get('p50_ms', 0):.1f} / {speak.get('p99_ms', 0):.1f} / {speak.get('max_ms', 0):.1f} ms "
          f"(p50 / p99 / max), listening p99 {listen.get('p99_ms', 0):.1f} ms; over the cadence {s['over_cadence']}"
          f" (first unit {s['first_unit_ms'] or 0:.1f} ms); audio {report['audio']}", flush=True)
    if "against" in report:
        print(f"live p99 over the bench's: {report['against']['live_over_bench_p99']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from app.cli.commands import run_command
    return run_command(run, build_parser().parse_args(argv), "python3 -m bench.minicpmo_live")


if __name__ == "__main__":
    sys.exit(main())
