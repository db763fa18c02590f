"""A speech file in place of the microphone, paced in real time, with the model's reply
discarded: demos and screenshots on machines without a sound card. Same engine-thread
interface as `AudioLink`."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine import read_audio

from .audio_io import ENGINE_RATE, FRAME_SIZE, AudioConfig, AudioCounters
from .echo_cancel import EchoSettings, EchoState


class FileFeed:
    plays = False  # nothing is played: nobody can talk over the model
    config = AudioConfig()  # the bounds a microphone's link keeps (how far the engine reads ahead)

    def __init__(self, path: str | Path):
        self._audio = read_audio(path)
        self.description = f"{Path(path).name} → engine (reply not played)"
        self._frames_read = 0
        self._started_at = None
        self._said: list[np.ndarray] = []

    def start(self) -> None:
        self._started_at = time.monotonic()

    def read_frame(self) -> np.ndarray | None:
        """The file's next 80 ms once its time has come; silence after the file ends."""
        due = (time.monotonic() - self._started_at) * ENGINE_RATE // FRAME_SIZE
        if self._frames_read >= due:
            return None
        start = self._frames_read * FRAME_SIZE
        frame = np.zeros(FRAME_SIZE, dtype=np.float32)
        chunk = self._audio[start:start + FRAME_SIZE]
        frame[:len(chunk)] = chunk
        self._frames_read += 1
        return frame

    def write_frame(self, pcm: np.ndarray) -> float:
        self._said.append(np.array(pcm, dtype=np.float32))
        return 0.0

    def played_frames(self, final: bool = False) -> list[np.ndarray]:
        """Nothing is played: the recording's model channel holds what the model said."""
        said, self._said = self._said, []
        return said

    def output_level_dbfs(self) -> float:
        return -120.0  # nothing is played

    def cut_speaker(self) -> None:
        pass  # nothing is queued for a speaker (and nothing played is ever spoken over)

    def speech_positions(self) -> None:
        return None  # no speaker: the model's words count as said when it says them

    def set_speaker_gain(self, gain: float) -> None:
        pass

    def set_echo(self, settings: EchoSettings) -> None:
        pass  # a file has no echo to cancel

    def echo_state(self) -> EchoState:
        return EchoState("off", None, 0.0)

    def problem(self) -> str | None:
        return None

    def counters(self) -> AudioCounters:
        return AudioCounters(0, 0, 0.0, 0.0, 0.0)

    def close(self) -> None:
        pass
