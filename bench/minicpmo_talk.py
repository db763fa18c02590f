"""What the person says in bench.minicpmo_live's conversation, and what is measured of it. They talk in
the schedule's listening runs (from LEAD_S into the run, once the model's last words have played) and stop
inside the second of the next speaking run's first unit, at END_IN_UNIT offsets in turn, so the schedule's
reply comes at the first unit boundary after their speech ends. With `talk_over`, they also talk over the
model OVER_AT_S into each speaking run of at least MIN_RUN units, for OVER_S. Measured: each reply's time
from the end of their speech to the model's first sound at the speaker (app.window.reply_time, as the
window's Engine details show it), and for each interruption, from the recording (the person's channel and
what the speaker played, lined up sample by sample): the onset of their speech to the model's silence."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

LEAD_S = 2.5
"""A speaking run's last unit flushes the tail (more than a second of speech) and plays from about 0.5 s
after its boundary: at 2.0 s into the listening run the person talked over its last words on the H100
(an interruption the person caused, not the model)."""
ANSWERED_S = 0.8  # an interruption decided up to this long after the person's speech ends was theirs
END_IN_UNIT = (0.1, 0.3, 0.5, 0.7, 0.9)
OVER_AT_S, OVER_S, MIN_RUN = 2.5, 1.5, 5
QUIET = 1e-3  # below this the speaker plays silence (the model's speech is far louder)
SILENT_S = 0.3  # the model is silent once the speaker stays quiet this long
PAUSE_S = 0.5  # the person's speech begins after this long quiet (shorter pauses are between words)
ENDED_S = 0.32  # quiet this long, their speech has ended (app.window.reply_time's pause)


def runs(plan) -> list[tuple[str, int, int]]:
    """(kind, first unit, units) of each run of the schedule, the forced listens as listening."""
    out: list[tuple[str, int, int]] = []
    for i, unit in enumerate(plan):
        kind = "speak" if unit.kind == "speak" else "listen"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1], out[-1][2] + 1)
        else:
            out.append((kind, i, 1))
    return out


def script(plan, talk_over: bool) -> tuple[list[tuple[float, float]], list[float]]:
    """The person's speech as (start, end) seconds of the conversation, and the onsets of those that talk
    over the model."""
    spans, over, turns = [], [], 0
    for kind, first, count in runs(plan):
        if kind == "listen" and first + count < len(plan):
            spans.append((first + LEAD_S, first + count + END_IN_UNIT[turns % len(END_IN_UNIT)]))
            turns += 1
        elif kind == "speak" and talk_over and count >= MIN_RUN:
            spans.append((first + OVER_AT_S, first + OVER_AT_S + OVER_S))
            over.append(first + OVER_AT_S)
    return spans, over


def caused_by_the_person(at_s: float, spans: list[tuple[float, float]]) -> bool:
    """Whether an interruption decided at `at_s` (seconds of the microphone's file) came while the person
    talked, or within ANSWERED_S after (the hold and the audio path's latency); otherwise the model's own
    voice interrupted it."""
    return any(start <= at_s <= end + ANSWERED_S for start, end in spans)


def microphone(spans: list[tuple[float, float]], seconds: float, speech: np.ndarray, rate: int) -> np.ndarray:
    """`seconds` of the microphone at `rate`: `speech` (cycled) within the spans, silence elsewhere."""
    out = np.zeros(int(seconds * rate), np.float32)
    cycled = np.resize(speech, len(out))
    for start, end in spans:
        a, b = int(start * rate), min(len(out), int(end * rate))
        out[a:b] = cycled[a:b]
    return out


def replies(reports) -> list[float]:
    """Each reply's seconds, from the engine thread's frame reports, as the window times them."""
    from app.window.reply_time import ReplyTime

    reply = ReplyTime()
    for report in reports:
        reply.add(report.index, report.level_dbfs, report.output_dbfs, report.counters.output_backlog_s)
    return reply.replies


def reply_parts(recording: Path, unit_s: float = 1.0) -> list[dict]:
    """Each reply from the recording, sample by sample, as the window's figure counts one: the model's first
    sound after SILENT_S of its quiet, from the person's last sound before it (at least ENDED_S before it, the
    model quiet from then on). Its parts: the rhythm, from that end to the next unit boundary (a unit's second ends
    every `unit_s` of the recording, which starts with the conversation's first unit), and the rest, ours:
    the unit's compute, the turn's own quiet start and the speaker's path."""
    import soundfile as sf

    audio, rate = sf.read(recording, dtype="float32")
    person, model = np.abs(audio[:, 0]) >= QUIET * 10, np.abs(audio[:, 1]) >= QUIET
    quiet = int(SILENT_S * rate)
    model_quiet = _quiet_from(~model, quiet)  # [i]: quiet over i .. i + quiet - 1
    onsets = [i + quiet for i in np.flatnonzero(model_quiet[:-1] & model[quiet:len(model_quiet) - 1 + quiet])]
    out = []
    for onset in onsets:
        spoken = np.flatnonzero(person[:onset])
        # the model quiet from before their end to its onset: its first sound since they spoke
        if not len(spoken) or onset - spoken[-1] < ENDED_S * rate or model[max(0, spoken[-1] - quiet):onset].any():
            continue
        end_s, first_s = (spoken[-1] + 1) / rate, onset / rate
        rhythm = math.ceil(end_s / unit_s) * unit_s - end_s
        out.append({"end_s": end_s, "reply_s": first_s - end_s, "rhythm_s": rhythm, "ours_s": first_s - end_s - rhythm})
    return out


def silences(recording: Path, cuts: list[int]) -> list[dict]:
    """For each interruption (the recording's sample where its cut was decided): the onset of the person's
    speech it answered (the first sound in their channel after the last PAUSE_S of quiet before the cut)
    and the model's silence after it (the first sample from which the speaker stays quiet SILENT_S)."""
    import soundfile as sf

    audio, rate = sf.read(recording, dtype="float32")
    person_quiet = _quiet_from(np.abs(audio[:, 0]) < QUIET * 10, int(PAUSE_S * rate))
    model_quiet = _quiet_from(np.abs(audio[:, 1]) < QUIET, int(SILENT_S * rate))
    out = []
    for at in cuts:
        pauses = np.flatnonzero(person_quiet[:at])
        onset = int(pauses[-1]) + int(PAUSE_S * rate) if len(pauses) else 0
        after = np.flatnonzero(model_quiet[at:])
        silent = at + int(after[0]) if len(after) else None
        out.append({"sample": at, "onset_s": onset / rate, "silent_s": None if silent is None else silent / rate,
                    "onset_to_silent_s": None if silent is None else (silent - onset) / rate})
    return out


def _quiet_from(quiet: np.ndarray, width: int) -> np.ndarray:
    """Whether the `width` samples from each one on are all quiet."""
    return np.convolve(quiet.astype(np.int32), np.ones(width, np.int32), "valid") == width
