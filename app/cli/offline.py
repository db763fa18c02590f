"""Offline mode: a conversation file to file, time-synchronous with the input.

The output has exactly the input's duration (frame-aligned at 24 kHz), which is what
Full-Duplex-Bench expects of a model's reply channel.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from engine import (
    FRAME_SIZE,
    SAMPLE_RATE,
    AudioInput,
    AudioOutput,
    OutputFiles,
    check_distinct,
    check_writable,
    output_format,
)

from ..conversation.prompt_progress import cli_prompt_progress
from ..conversation.transcript import words_with_times

ROLE_SHOWN = 40
"""Characters of the role prompt the summary shows."""


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second; the line is
    ended however the work ends (Ctrl-C included)."""

    def __init__(self, total: int | None, stream=None, unit: str = "frames"):
        """`total` None: unknown until the end (a stream), the count alone is shown."""
        # sys.stderr as it is now, not at import (a test's captured stream may be gone by then)
        self.total, self.stream, self._last, self.unit = total, stream or sys.stderr, 0.0, unit
        self._open = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()

    def update(self, done: int) -> None:
        now = time.monotonic()
        if (self.total is None or done < self.total) and now - self._last < 0.1:
            return
        self._last = now
        if self.total is None:
            self.stream.write(f"\r{done} {self.unit}")
        else:
            width = 30
            filled = width * done // max(self.total, 1)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {self.unit}")
        self._open = True
        self.stream.flush()


def run_offline(args) -> None:
    """The runtime's fast path is on: it never changes the output."""
    from engine import (
        DuplexSession,
        Persona,
        RuntimeOptions,
        check_persona,
        limit_cpu_threads,
        load_model,
        select_device,
    )

    # Everything the user can get wrong is checked before minutes of work, not after.
    check_distinct({"--input": args.input, "--adapter": args.adapter},
                   {"--output": args.output, "--transcript": args.transcript})
    outputs = [Path(p) for p in (args.output, args.transcript) if p]
    for path in outputs:
        check_writable(path)
    output_format(args.output)
    device = select_device(args.device)
    limit_cpu_threads(device)
    options = RuntimeOptions(seed=args.seed, greedy=args.greedy, policy=args.policy, tau=args.tau,
                             block=args.block, verify=args.verify)
    if args.adapter and not Path(args.adapter).is_file():
        raise ValueError(f"{args.adapter}: no such adapter file")
    persona = Persona(args.voice, args.role or "") if (args.voice or args.role) else None
    if persona is not None:  # from the config and the prompt files alone, before the weights load
        check_persona(args.model, persona.voice, persona.role)
    source = AudioInput(args.input)
    # Locked before minutes of work: a second job on the same output refuses at once.
    with OutputFiles(*outputs) as out:
        model = load_model(args.model, device=device, weights=args.weights)
        adapter = args.adapter or (model.predictor_file if args.policy != "ar" else None)
        session = DuplexSession(model, options, persona, predictor=adapter, prompt_progress=cli_prompt_progress())
        pieces, tally = [], session.tally()
        replies = _replies(session, source, pieces, tally)
        try:
            if device.startswith("cuda"):
                started = time.perf_counter()
                print("preparing the GPU: compiling kernels, capturing graphs (up to a minute the first time on "
                      "this computer)…", file=sys.stderr)
                session.prepare()  # compile and capture now, not during the first seconds of speech
                print(f"prepared in {time.perf_counter() - started:.2f} s (kernels compiled, graphs captured)",
                      file=sys.stderr)
            _write_all(args.output, replies, args.transcript,
                       lambda: {"model": model.name, "words": words_with_times(pieces)}, out)
        finally:
            replies.close()  # ends the progress line before any error is printed
            session.close()
    prompts = prompt_line(session)
    if prompts:
        print(prompts, file=sys.stderr)
    _print_summary(session.speak_times, source.given / SAMPLE_RATE)
    note_nonfinite(session.nonfinite_samples)
    if tally.summary():
        print(tally.summary(), file=sys.stderr)


def _replies(session, source: AudioInput, pieces: list[str], tally):
    """The model's reply frame by frame as the input streams in, cut to the input's length;
    its text pieces and the family's tally of its step reports are collected on the way."""
    with Progress(None if source.expected is None else -(-source.expected // FRAME_SIZE)) as progress:
        for i, (frame, samples) in enumerate(source.frames()):
            result = session.step(frame)
            pieces.append(result.text)
            tally.add(result.report, result.timings)
            progress.update(i + 1)
            yield result.pcm[:samples]


def _write_all(audio_path: str, pcm, transcript_path: str | None, transcript, out: OutputFiles | None = None) -> None:
    """The reply (an array, or arrays as they come) and the transcript (a dict, or a function
    giving it once the audio is written) into the locked output set `out` (default: a set of
    their own), so either both are moved into place or neither is."""
    if out is None:
        with OutputFiles(*(Path(p) for p in (audio_path, transcript_path) if p)) as own:
            _write_all(audio_path, pcm, transcript_path, transcript, own)
        return
    target = Path(audio_path)
    with AudioOutput(out.temporary(target), format_of=target) as audio:
        for chunk in [pcm] if isinstance(pcm, np.ndarray) else pcm:
            audio.write(chunk)
    if transcript_path:
        record = transcript() if callable(transcript) else transcript
        out.temporary(Path(transcript_path)).write_text(json.dumps(record, indent=2))


def note_nonfinite(count: int) -> None:
    """Say how many input samples were not numbers (replaced where PCM enters the engine,
    engine/files/finite.py, so the model kept hearing)."""
    if count:
        print(f"{count} non-finite input samples replaced (NaN by silence, infinity by full scale)",
              file=sys.stderr)


def prompt_line(session) -> str | None:
    """The persona's prompts (a voice, a role), timed on their own: they run before the
    conversation (in the session's reset), outside the SPEAK times. None without prompts."""
    persona = session.persona
    role = persona.role.strip()
    if not (persona.voice or role):
        return None
    shown = role if len(role) <= ROLE_SHOWN else role[:ROLE_SHOWN - 3].rstrip() + "..."
    role_part = f'role "{shown}"' if role else "no role"
    return f"prompts {session.prompt_s:.2f} s (voice {persona.voice or 'none'}, {role_part})"


def _print_summary(speak_times: list[float], duration: float) -> None:
    if not speak_times:
        print(f"{duration:.2f} s processed (under one second: no SPEAK time summary)", file=sys.stderr)
        return
    times = np.asarray(speak_times)
    over = int((times > 1.0).sum())
    print(f"SPEAK time per second of output over {len(times)} s: mean {times.mean():.3f} s, "
          f"p99 {np.percentile(times, 99):.3f} s, max {times.max():.3f} s, first {times[0]:.3f} s, "
          f"{over} second(s) over the 1.0 s cadence", file=sys.stderr)
