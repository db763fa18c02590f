"""Recording of a conversation: a stereo 32-bit float WAV (user left, model right, as the
engine heard and spoke them) and a transcript JSON beside it.

Both are written while the conversation runs and flushed about once a second, so a crash
or a lost device keeps everything up to the last flush: libsndfile rewrites the WAV header
on every flush, and the JSON is replaced atomically.
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import numpy as np
import soundfile as sf

from .audio_io import ENGINE_RATE, FRAME_SIZE
from .transcript import Words

FLUSH_EVERY_FRAMES = 12  # about once a second


class ConversationRecorder:
    def __init__(self, folder: str | Path, model_name: str, options: dict, audio_processing: dict | None = None):
        """`audio_processing`: what the microphone path did before the model heard it (echo
        cancellation and its options; None: nothing, e.g. a file fed in)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self.wav_path = _unused_path(folder, f"conversation_{stamp}", ".wav")
        self.json_path = self.wav_path.with_suffix(".json")
        # 32-bit float, exactly what the engine heard and spoke, in the extensible WAV header
        # (WAVE_FORMAT_EXTENSIBLE) that tools expect for non-PCM samples.
        self._wav = sf.SoundFile(str(self.wav_path), "w", ENGINE_RATE, 2, subtype="FLOAT", format="WAVEX")
        self._record = {
            "model": model_name,
            "started": datetime.now().isoformat(timespec="seconds"),
            "audio": self.wav_path.name,
            "sample_rate": ENGINE_RATE,
            "channels": ["user", "model"],
            "options": dict(options),
            "audio_processing": audio_processing,
            "frames": 0,
            "words": [],  # the model's, with start and end seconds (app.transcript: as `offline` writes)
        }
        self._stereo = np.zeros((FRAME_SIZE, 2), dtype=np.float32)
        self._words = Words()
        self._closed = False

    @property
    def frames(self) -> int:
        return self._record["frames"]

    def add_frame(self, user_pcm: np.ndarray, model_pcm: np.ndarray, text: str) -> None:
        self._stereo[:, 0] = user_pcm
        self._stereo[:, 1] = model_pcm
        self._wav.write(self._stereo)
        self._words.add(self.frames, text)
        self._record["frames"] += 1
        if self.frames % FLUSH_EVERY_FRAMES == 0:
            self.flush()

    def note_options(self, options: dict) -> None:
        """Options changed mid conversation: keep when, so the recording can be read."""
        seconds = round(self.frames * FRAME_SIZE / ENGINE_RATE, 2)
        self._record.setdefault("option_changes", []).append({"t": seconds, **options})

    def note_audio_processing(self, processing: dict) -> None:
        """The microphone path's processing changed mid conversation."""
        seconds = round(self.frames * FRAME_SIZE / ENGINE_RATE, 2)
        self._record.setdefault("audio_processing_changes", []).append({"t": seconds, **processing})

    def flush(self) -> None:
        self._wav.flush()
        self._record["words"] = self._words.finished()
        temporary = self.json_path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self._record, indent=1, ensure_ascii=False))
        os.replace(temporary, self.json_path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._record["ended"] = datetime.now().isoformat(timespec="seconds")
        try:
            self.flush()
        finally:
            self._wav.close()


def _unused_path(folder: Path, stem: str, suffix: str) -> Path:
    path = folder / f"{stem}{suffix}"
    n = 2
    while path.exists():
        path = folder / f"{stem}_{n}{suffix}"
        n += 1
    return path
