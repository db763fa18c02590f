"""Recording of a conversation: a stereo 32-bit float WAV and a transcript JSON beside it. Left: the
microphone's frames as the model heard them; right: what the speaker played meanwhile (its volume
aside; app/audio/played_track.py), so late speech is late and skipped speech is missing, as the user
heard it. The JSON's words keep the model's time; `speaker_skips` marks what the speaker skipped.

Both are written while the conversation runs and flushed about once a second, so a crash or a lost
device keeps everything up to the last flush: the WAV is written here (libsndfile writes a WAV's
sizes only on close, so a killed recording looked empty to every reader but libsndfile) with its
header's sizes rewritten at each flush, so it is a complete WAV of what was flushed at any moment;
the JSON, whose `frames` counts the frames flushed, is replaced atomically after the audio it
describes. Both are fsynced once a second, so a power cut also loses at most about a second.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import threading
from datetime import datetime
from pathlib import Path

import numpy as np

from ..audio.audio_io import ENGINE_RATE, FRAME_SIZE
from .transcript import Words

log = logging.getLogger("duplexcadence.recorder")
FLUSH_EVERY_FRAMES = 12  # about once a second


class ConversationRecorder:
    def __init__(self, folder: str | Path, model_name: str, options: dict, audio_processing: dict | None = None):
        """`audio_processing`: what the microphone path did before the model heard it (echo
        cancellation and its options; None: nothing, e.g. a file fed in)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        while True:  # two recorders started in the same second never share a file
            self.wav_path = _unused_path(folder, f"conversation_{stamp}", ".wav")
            try:
                self._wav = FloatWav(self.wav_path, ENGINE_RATE, 2)
                break
            except FileExistsError:
                continue
        self.json_path = self.wav_path.with_suffix(".json")
        self._record = {
            "model": model_name,
            "started": datetime.now().isoformat(timespec="seconds"),
            "audio": self.wav_path.name,
            "sample_rate": ENGINE_RATE,
            "channels": ["user", "model"],
            "options": dict(options),
            "audio_processing": audio_processing,
            "frames": 0,
            "words": [],  # the model's, with start and end seconds (app.conversation.transcript: as `offline` writes)
        }
        self._stereo = np.zeros((FRAME_SIZE, 2), dtype=np.float32)
        self._words = Words()
        self._added = 0  # frames given; the JSON's "frames" counts those the WAV holds
        self._closed = False
        try:
            self.flush()  # the transcript exists from the start, as the WAV does
        except BaseException:  # e.g. the folder is full: nothing is left open or half-made
            self._wav.close()
            self.wav_path.unlink(missing_ok=True)
            raise

    @property
    def frames(self) -> int:
        return self._added

    def add_frame(self, user_pcm: np.ndarray, model_pcm: np.ndarray, text: str) -> None:
        self._stereo[:, 0] = user_pcm
        self._stereo[:, 1] = model_pcm
        self._wav.write(self._stereo)
        self._words.add(self._added, text)
        self._added += 1
        if self._added % FLUSH_EVERY_FRAMES == 0:
            self.flush()

    def note_options(self, options: dict) -> None:
        """Options changed mid conversation: keep when, so the recording can be read."""
        seconds = round(self.frames * FRAME_SIZE / ENGINE_RATE, 2)
        self._record.setdefault("option_changes", []).append({"t": seconds, **options})

    def note_speaker_skip(self, frame: int, seconds: float, behind_s: float) -> None:
        """The model's audio of `frame` was skipped, never played (the speaker was `behind_s`
        behind): one entry per run of frames, where it begins in the model's audio (`t`,
        `sample`), how long, and how far behind the speaker was (the gap is that much later in
        the model channel)."""
        skips = self._record.setdefault("speaker_skips", [])
        sample = frame * FRAME_SIZE
        last = skips[-1] if skips else None
        if last and last["sample"] + last["frames"] * FRAME_SIZE == sample:
            last["frames"] += 1
            last["seconds"] = round(last["seconds"] + seconds, 3)
        else:
            skips.append({"t": round(sample / ENGINE_RATE, 2), "sample": sample, "frames": 1,
                          "seconds": round(seconds, 3), "behind_s": round(behind_s, 2)})
        self._record["speaker_skipped_s"] = round(sum(skip["seconds"] for skip in skips), 3)

    def note_interruption(self, frame: int, dropped_s: float) -> None:
        """The person spoke over the model at `frame`: its speech was cut there (faded out in the
        model channel as played) and `dropped_s` of it, queued, was never played."""
        sample = frame * FRAME_SIZE
        self._record.setdefault("interruptions", []).append(
            {"t": round(sample / ENGINE_RATE, 2), "sample": sample, "dropped_s": round(dropped_s, 3)})

    def note_audio_processing(self, processing: dict) -> None:
        """The microphone path's processing changed mid conversation."""
        seconds = round(self.frames * FRAME_SIZE / ENGINE_RATE, 2)
        self._record.setdefault("audio_processing_changes", []).append({"t": seconds, **processing})

    def flush(self) -> None:
        self._wav.flush()
        self._record["frames"] = self._wav.frames // FRAME_SIZE
        self._record["words"] = self._words.finished()
        temporary = self.json_path.with_suffix(".json.tmp")  # this recorder's alone, as the WAV's name is
        temporary.write_text(json.dumps(self._record, indent=1, ensure_ascii=False))
        os.replace(temporary, self.json_path)
        self._wav.sync_soon(self.json_path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._record["ended"] = datetime.now().isoformat(timespec="seconds")
        try:
            self.flush()
        finally:
            self._wav.close()


class FloatWav:
    """32-bit float WAV (WAVE_FORMAT_EXTENSIBLE, the header tools expect for non-PCM samples),
    exactly what the engine heard and spoke. Frames are kept in memory until `flush` appends
    them and rewrites the header's sizes, so between flushes the file is a valid WAV of all it
    holds. fsync runs on a thread of its own, so a slow disk never delays a frame."""

    _HEADER = struct.Struct("<4sI4s4sIHHIIHHHHI16s4sII4sI")
    _FLOAT = bytes.fromhex("0300000000001000800000aa00389b71")  # KSDATAFORMAT_SUBTYPE_IEEE_FLOAT

    def __init__(self, path: Path, rate: int, channels: int):
        self.rate, self.channels, self.frames = rate, channels, 0
        self._file = open(path, "xb")  # noqa: SIM115 (closed by close)
        self._pending: list[bytes] = []
        try:
            self._file.write(self._header())
            self._file.flush()
        except BaseException:
            self._file.close()
            path.unlink(missing_ok=True)
            raise
        self._due, self._done, self._extra = threading.Event(), False, None
        self._syncer = threading.Thread(target=self._sync_when_due, name="recording fsync", daemon=True)
        self._syncer.start()

    def write(self, block: np.ndarray) -> None:
        """[n, channels] float32."""
        self._pending.append(np.ascontiguousarray(block, dtype="<f4").tobytes())

    def flush(self) -> None:
        data = b"".join(self._pending)
        end = self._data_end()
        self._file.seek(end)
        self._file.write(data)
        self._file.flush()  # the samples are in the file before the header counts them
        self._pending.clear()  # only now: a failed write leaves them to the next flush
        self.frames += len(data) // (4 * self.channels)
        self._file.seek(0)
        self._file.write(self._header())
        self._file.flush()

    def sync_soon(self, extra: Path | None = None) -> None:
        """Ask for an fsync of the file (and of `extra`) on the fsync thread."""
        self._extra = extra
        self._due.set()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._done = True
            self._due.set()
            self._syncer.join()
            try:
                self._sync()  # the last second too, whatever the thread was doing when asked
            except OSError as exc:
                log.warning("recording %s: the final sync failed (%s)", self._file.name, exc.strerror)
            self._file.close()

    def _sync_when_due(self) -> None:
        failed = False
        while not self._done:
            self._due.wait()
            self._due.clear()
            try:
                self._sync()
            except OSError as exc:  # a lost or full disk: logged once (the next writes fail where they are made)
                if not failed:
                    log.warning("recording %s: sync failed (%s)", self._file.name, exc.strerror)
                failed = True

    def _sync(self) -> None:
        os.fsync(self._file.fileno())
        if self._extra is not None and self._extra.exists():
            with open(self._extra, "rb+") as extra:
                os.fsync(extra.fileno())

    def _data_end(self) -> int:
        """Where the next samples go: after those the header counts (not the file's end, which
        a failed write may have left past them)."""
        return self._HEADER.size + self.frames * 4 * self.channels

    def _header(self) -> bytes:
        # Past 4 GiB (6.2 hours of stereo at 24 kHz) the sizes stay at their largest value,
        # which readers take as "to the end of the file".
        data = min(self.frames * 4 * self.channels, _LARGEST - 72)
        return self._HEADER.pack(
            b"RIFF", 72 + data, b"WAVE",
            b"fmt ", 40, 0xFFFE, self.channels, self.rate, self.rate * 4 * self.channels, 4 * self.channels, 32,
            22, 32, (1 << self.channels) - 1, self._FLOAT,
            b"fact", 4, min(self.frames, _LARGEST),
            b"data", data)


_LARGEST = 0xFFFFFFFF
"""A RIFF size field's largest value."""


def _unused_path(folder: Path, stem: str, suffix: str) -> Path:
    path = folder / f"{stem}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{stem}_{n}{suffix}"
        n += 1
    return path
