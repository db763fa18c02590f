"""`python3 -m bench.minicpmo_live`: MiniCPM-o 4.5 as the app runs it, live: the app's engine thread with the
window's defaults (echo cancellation, barge-in, the recorder), PortAudio streams on the private PulseAudio
server (bench.virtual_audio), bench.minicpmo's schedule of speaking and listening units forced as that bench
forces them, and a file as the microphone: a person talking in the listening runs (bench.minicpmo_talk).
`--phase talk`: loudspeakers, the speaker heard by the microphone 60 ms later at about -13 dB, nobody talking
over the model. Reported: what bench.minicpmo reports of the units (speaking p50 / p99 / max, listening, the
units over the cadence, the first included; a unit's time is the engine period it ran in), each reply's time,
the interruptions (0 expected) and the audio path's counts. `--phase barge-in`: headphones, the person also
talking over the model; each interruption's onset-to-silence time. `--against`: a bench.minicpmo JSON's
speaking p99 beside ours. Full size needs a CUDA GPU; `--folder` runs a checkpoint folder as it is."""
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
FRAME = 1920  # the engine's period, in samples at its 24 kHz


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m bench.minicpmo_live",
                                     description="MiniCPM-o 4.5 live through the app's engine thread and PortAudio")
    parser.add_argument("--output", type=Path, required=True, help="the JSON report")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--reference", type=Path,
                        help="a MiniCPM-o-Demo checkout (its MiniCPMO45/): full-size random weights are written "
                             "from its code")
    source.add_argument("--folder", type=Path, help="a checkpoint folder in the official layout, run as it is")
    parser.add_argument("--phase", choices=["talk", "barge-in"], default="talk", help="see above (default talk)")
    parser.add_argument("--seconds", type=int, default=240, help="units to run, one a second (default 240)")
    parser.add_argument("--weights", choices=["bf16", "int8", "int4"], help="as for the app's Weights box")
    parser.add_argument("--device", default="auto", help="as the app's --device (default: a GPU if there is one)")
    parser.add_argument("--against", type=Path, help="a bench.minicpmo JSON whose speaking p99 is set beside ours")
    parser.add_argument("--audio-bundle", type=Path,
                        help="the sound server's files where the machine has none (packaging/gpu_audio.sh)")
    parser.add_argument("--scratch", type=Path, help="where the full-size checkpoint is written and kept for the next "
                                                     "run (default: a temporary folder, deleted)")
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

    from . import minicpmo_talk as talk
    from .minicpmo import unit_audio
    from .virtual_audio import VirtualAudio

    if args.seconds < 1:
        raise SystemExit("--seconds must be at least 1")
    device = select_device(args.device)
    if args.reference is not None and not device.startswith("cuda"):
        raise SystemExit("full-size weights need a CUDA GPU (torch sees none); --folder runs a small checkpoint")
    limit_cpu_threads(device)
    report: dict = {"bench": "minicpmo_live", "phase": args.phase, "seconds": args.seconds, "weights": args.weights,
                    "torch": torch.__version__, "python": platform.python_version(),
                    "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"}
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        tmp = Path(tmp)
        folder = args.folder
        if folder is None:
            from .minicpmo_weights import random_checkpoint
            folder, report["checkpoint"] = random_checkpoint(args.reference, "full", torch.device(device), args.seed,
                                                             True, tmp, args.scratch)
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
        spans, onsets = talk.script(plan, talk_over=args.phase == "barge-in")
        report["talked_over_at_s"] = onsets
        microphone = tmp / "microphone.wav"
        speech = np.concatenate(unit_audio(30))
        _write_wav(microphone, talk.microphone(spans, args.seconds + 10, speech, INPUT_RATE))
        audio = VirtualAudio(tmp / "pulse", bundle=args.audio_bundle)
        audio.start()
        room = audio.loop_speaker_into_microphone(60, "60%") if args.phase == "talk" else None
        try:
            config = AudioConfig().for_step(model.step_samples / model.input_rate)  # as the app's window does
            link = AudioLink(list_devices("input")[0], list_devices("output")[0], config, echo=EchoSettings())
            cuts = _cut_times(link)
            recorder = ConversationRecorder(tmp / "recordings", model.name, {}, None)
            signals = Signals()
            worker = ConversationWorker(session, link, recorder, (None, session.default_role), signals)
            worker.set_barge_in(True)
            worker.start()
            if not signals.ready.wait(300):
                raise SystemExit(f"the conversation did not start: {signals.failed.values}")
            player = audio.play_into_microphone(microphone)
            played_from = time.monotonic()  # the file's first sample, give or take the server's start
            queue, stops = link._speaker_queue, []  # its cuts, in the samples it handed the device
            deadline = time.monotonic() + args.seconds + 60
            told = time.monotonic()
            while (_units(signals.frame.values) < args.seconds and time.monotonic() < deadline
                   and not signals.done.is_set()):
                time.sleep(0.05)
                if time.monotonic() - told > 30:  # as it goes: a call cut off at its limit still says something
                    told = time.monotonic()
                    done = [r.output.timings["total"] for r in list(signals.frame.values) if r.output.steps]
                    print(f"{len(done)} units, the slowest {max(done, default=0) * 1000:.1f} ms, {len(cuts)} "
                          "interruptions", flush=True)
                if queue.cut_at is not None and (not stops or stops[-1][0] != queue.cut_at):
                    stops.append((queue.cut_at, queue.cut_asked_at))
            worker.stop()
            signals.done.wait(60)
            player.terminate()
            report.update(_results(signals, plan))
            report["replies_s"] = talk.replies(signals.frame.values)
            report["interruptions"] = len(cuts)
            report["interrupted_at_s"] = [at - played_from for at in cuts]
            report["self_interruptions"] = sum(not talk.caused_by_the_person(at - played_from, spans)
                                               for at in cuts)
            report["stops"] = {"device_samples_per_period": round(FRAME * queue.rate / 24000),
                               "asked_to_silent": [at + len(queue._ramp) - asked for at, asked in stops]}
            end = signals.finished.values[-1] if signals.finished.values else None
            if end is not None and end.recording is not None:
                report["replies"] = talk.reply_parts(end.recording)
            if args.phase == "barge-in" and end is not None and end.recording is not None:
                record = json.loads(end.transcript.read_text())
                report["cuts"] = talk.silences(end.recording, [c["sample"] for c in record.get("interruptions", [])])
        finally:
            if room is not None:
                audio.unload(room)
            audio.stop()
            session.close()
    if args.against is not None:
        report["against"] = _against(args.against, report["units"])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    _show(report)
    return report


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


def _cut_times(link) -> list[float]:
    """When (time.monotonic) barge-in cut the speaker, as it happens: at once, while a unit may still be
    computed (the session hears of it after the unit)."""
    cuts, cut = [], link.cut_speaker

    def counted() -> None:
        cuts.append(time.monotonic())
        cut()

    link.cut_speaker = counted
    return cuts


def _against(path: Path, units: list[dict]) -> dict:
    """The live speaking p99 over the units the bench's run of ours had, beside that run's: the LLM's decode
    slows as the context grows (about 150 to 190 ms a speaking unit from the first minute to the fourth on
    an H100), so a 60-unit bench is compared with the live run's first 60."""
    ours = json.loads(path.read_text())["ours"]
    bench = ours["summary"]["speaking"]["p99_ms"]
    live = summarize(units[:len(ours["units"])])["speaking"].get("p99_ms")
    return {"file": str(path), "units": min(len(units), len(ours["units"])), "bench_speaking_p99_ms": bench,
            "live_speaking_p99_ms": live, "live_over_bench_p99": live / bench if live else None}


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
            "turn_starts": turn_starts(signals.frame.values, records),
            "frames": len(signals.frame.values), "failed": signals.failed.values, "warnings": signals.warning.values,
            "audio": None if counters is None else {
                "speech_skipped_s": counters.dropped_output_s, "speaker_ran_dry": counters.output_underflows,
                "microphone_lost_s": counters.dropped_input_s}}


def turn_starts(reports, records: list[dict]) -> list[dict]:
    """Where each turn's first speech waited, on the engine's side (the recording's `replies` give the whole):
    the microphone audio waiting when its unit ran, the unit's time, the periods from its frame to the first
    one loud at the speaker (the turn's quiet start), and the model's audio queued before that one."""
    from app.conversation.barge_in import MODEL_DBFS

    by_index = {report.index: report for report in reports}
    out = []
    for before, unit in zip(records, records[1:]):
        if unit["kind"] != "speak" or before["kind"] == "speak":
            continue
        loud = next((i for i in range(unit["frame"], unit["frame"] + 40)
                     if i in by_index and by_index[i].output_dbfs >= MODEL_DBFS), None)
        if loud is None:
            continue
        out.append({"unit": unit["unit"], "microphone_waiting_s": by_index[unit["frame"]].counters.input_backlog_s,
                    "unit_s": unit["ms"] / 1000, "quiet_start_s": (loud - unit["frame"]) * FRAME / 24000,
                    "queued_before_s": by_index[loud].counters.output_backlog_s})
    return out


def _show(report: dict) -> None:
    s = report["summary"]
    speak, listen = s["speaking"], s["listening"]
    print(f"units {len(report['units'])} ({report['units_as_planned']} as planned); speaking "
          f"{speak.get('p50_ms', 0):.1f} / {speak.get('p99_ms', 0):.1f} / {speak.get('max_ms', 0):.1f} ms "
          f"(p50 / p99 / max), listening p99 {listen.get('p99_ms', 0):.1f} ms; over the cadence {s['over_cadence']}"
          f" (first unit {s['first_unit_ms'] or 0:.1f} ms); audio {report['audio']}", flush=True)
    replies = report["replies_s"]
    print(f"replies {len(replies)}, p95 {np.percentile(replies, 95) if replies else 0:.2f} s; interruptions "
          f"{report['interruptions']} ({report['self_interruptions']} with the person quiet); speech stopped within "
          f"{max(report['stops']['asked_to_silent'], default=0)} device samples of the cut (one period: "
          f"{report['stops']['device_samples_per_period']})", flush=True)
    parts = report.get("replies", [])
    if parts:
        p95 = {key: np.percentile([r[key] for r in parts], 95) for key in ("reply_s", "rhythm_s", "ours_s")}
        print(f"replies in the recording {len(parts)}: p95 {p95['reply_s']:.2f} s; the rhythm's part p95 "
              f"{p95['rhythm_s']:.2f} s, ours p95 {p95['ours_s']:.2f} s", flush=True)
    starts = report.get("turn_starts", [])
    if starts:
        p50 = {key: np.median([t[key] for t in starts]) for key in starts[0] if key != "unit"}
        print("turn starts (p50): " + ", ".join(f"{key} {value:.3f}" for key, value in p50.items()), flush=True)
    over = [c["onset_to_silent_s"] for c in report.get("cuts", []) if c["onset_to_silent_s"] is not None]
    if over:
        print(f"talked over {len(over)} times: silent {np.percentile(over, 95):.2f} s (p95) after the onset",
              flush=True)
    if "against" in report:
        a = report["against"]
        print(f"live p99 over the bench's, on its {a['units']} units: {a['live_over_bench_p99']:.3f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from app.cli.commands import run_command
    return run_command(run, build_parser().parse_args(argv), "python3 -m bench.minicpmo_live")


if __name__ == "__main__":
    sys.exit(main())
