"""The recordings on disk: each conversation's WAV and transcript JSON (app/conversation/recorder.py) read
into what the Recordings window lists, a bad file included, and its words as timed lines."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import soundfile as sf
from PyQt6.QtCore import QStandardPaths

from engine import FRAME_SECONDS, FRAME_SIZE

from .transcript import Words

STAMP = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")  # the recorder's file names
LINE_PAUSE_S = 1.5  # a pause this long starts a new line in the preview
LINE_WORDS = 14


def older_recordings_dir() -> Path:
    """Where earlier versions recorded: Qt's app-data folder, which doubles the name
    (organisation and application are both DuplexCadence)."""
    data = Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation))
    return data / "DuplexCadence" / "DuplexCadence" / "recordings"


@dataclass
class Recording:
    wav: Path
    started: datetime | None = None
    seconds: float | None = None
    model: str = ""
    words: list[dict] | None = None  # None: no readable transcript
    size: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def json(self) -> Path:
        return self.wav.with_suffix(".json")


def read_recording(wav: Path) -> Recording:
    """What the transcript JSON says, else the WAV's header and the file name; a bad file gives
    a Recording with its problems, never an exception."""
    rec = Recording(wav, size=_size(wav) + _size(wav.with_suffix(".json")))
    if rec.json.exists():
        try:
            _read_transcript(rec)
        except (OSError, ValueError) as exc:
            rec.problems.append(f"transcript unreadable: {exc}")
    if not wav.exists():
        rec.problems.append("audio file missing")
    elif rec.seconds is None:
        try:
            rec.seconds = sf.info(str(wav)).duration
        except RuntimeError as exc:  # soundfile's LibsndfileError
            rec.problems.append(f"audio unreadable: {getattr(exc, 'error_string', exc)}")
    if rec.started is None:
        stamp = STAMP.search(wav.stem)
        if stamp:
            rec.started = datetime.strptime(stamp.group(), "%Y-%m-%d_%H-%M-%S")
        elif wav.exists():
            rec.started = datetime.fromtimestamp(wav.stat().st_mtime)
    return rec


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_transcript(rec: Recording) -> None:
    """Fills `rec` from its JSON (app/conversation/recorder.py's fields); ValueError naming the bad key."""
    record = json.loads(rec.json.read_text(encoding="utf-8"))
    if not isinstance(record, dict):
        raise ValueError(f"not an object but {type(record).__name__}")
    model, started, when = record.get("model", ""), record.get("started"), None
    if not isinstance(model, str):
        raise ValueError(f"model: not text: {model!r}")
    if started is not None:
        try:
            when = datetime.fromisoformat(started)
        except (TypeError, ValueError):
            raise ValueError(f"started: not a date and time: {started!r}") from None
        when = when.astimezone().replace(tzinfo=None) if when.tzinfo else when
    frames, rate = record.get("frames"), record.get("sample_rate")
    seconds = None
    if frames is not None or rate is not None:
        if not (isinstance(frames, int) and frames >= 0 and isinstance(rate, int) and rate > 0):
            raise ValueError(f"frames {frames!r} / sample_rate {rate!r}: not a count and a rate")
        seconds = frames * FRAME_SIZE / rate
    words = _words(record)
    rec.model, rec.started, rec.seconds, rec.words = model, when, seconds, words


def _words(record: dict) -> list[dict]:
    """The words with their times; earlier versions kept the model's pieces with the time of
    their frame ("transcript": [{"t", "text"}]): read as words the same way."""
    if "words" in record:
        words = record["words"]
        ok = isinstance(words, list) and all(
            isinstance(w, dict) and isinstance(w.get("word"), str)
            and all(isinstance(w.get(k), (int, float)) for k in ("start", "end")) for w in words)
        if not ok:
            raise ValueError('words: not a list of {"word", "start", "end"}')
        return words
    pieces = record.get("transcript", [])
    if not (isinstance(pieces, list) and all(
            isinstance(p, dict) and isinstance(p.get("text"), str) and isinstance(p.get("t"), (int, float))
            for p in pieces)):
        raise ValueError('transcript: not a list of {"t", "text"}')
    words = Words()
    for piece in pieces:
        words.add(round(piece["t"] / FRAME_SECONDS), piece["text"])
    return words.finished()


def list_recordings(folders: list[Path]) -> list[Recording]:
    """Every recording in `folders` (missing ones hold none), newest first: each WAV, and each
    transcript whose WAV is gone."""
    wavs: set[Path] = set()
    for folder in folders:
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for path in entries:
            if path.suffix.lower() == ".wav" or (path.suffix == ".json" and not path.with_suffix(".wav").exists()):
                wavs.add(path.with_suffix(".wav") if path.suffix == ".json" else path)
    recordings = [read_recording(wav) for wav in wavs]
    recordings.sort(key=lambda r: (r.started or datetime.min, r.wav.name), reverse=True)
    return recordings


def transcript_text(words: list[dict]) -> str:
    """Lines of words, each line with the time it starts at: a new line at a pause."""
    lines: list[tuple[float, list[str]]] = []
    last_end = None
    for word in words:
        if not lines or word["start"] - last_end >= LINE_PAUSE_S or len(lines[-1][1]) >= LINE_WORDS:
            lines.append((word["start"], []))
        lines[-1][1].append(word["word"])
        last_end = word["end"]
    return "\n".join(f"[{clock(start)}] {' '.join(text)}" for start, text in lines)


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def size_text(size: int) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
