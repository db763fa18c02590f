"""MiniCPM-o's voices: recordings a conversation speaks like. A voice enters twice, as the
reference's `DuplexCapability.prepare(ref_audio=..., prompt_wav_path=...)` takes it: its audio
rows in the LLM's system prompt (the recording as librosa.load(sr=16000) reads it: channels
averaged, soxr's high-quality resampler) and the tail's voice prompt, made from it by the
token2wav folder's ONNX front end (engine.token2wav.voice_prompt). Both are made once, at load."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import soxr

from ...errors import CheckpointError
from ...files.paths import SPEECH_SAMPLE
from ...token2wav.prompt import Prompt
from ...token2wav.voice_prompt import FILES, Recording, VoiceFrontEnd

VOICES = {"DuplexCadence sample": (SPEECH_SAMPLE, 7.0)}
"""Name -> (recording, seconds read from its start). The project's own speech sample, up to its
pause at 7 s (the demo's voices are 6-7.5 s). The reference demo's signature voice is a recording
in its repository, not in the model's: it is not ours to ship."""


@dataclasses.dataclass(frozen=True)
class Voice:
    name: str
    samples16k: np.ndarray
    """float32 [T]: what the LLM's reference rows are made from."""
    prompt: Prompt


def prepare_voices(tail_folder: Path) -> tuple[dict[str, Voice], str]:
    """The voices made from VOICES with the folder's front end, or none and why (a sentence
    part: the front end's files are missing, or onnxruntime is)."""
    missing = [name for name in FILES if not (tail_folder / name).is_file()]
    if missing:
        return {}, f"{tail_folder} has no {' or '.join(missing)} to make a voice with"
    voices = {}
    try:  # a model whose voice cannot be made still answers, in text: the notice says why
        front_end = VoiceFrontEnd(tail_folder)
        for name, (path, seconds) in VOICES.items():
            recording = Recording.read(Path(path), seconds)
            samples = soxr.resample(recording.mean.numpy(), recording.rate, 16000, quality="HQ")
            voices[name] = Voice(name, samples.astype(np.float32), front_end.prompt(recording))
    except (CheckpointError, ValueError) as error:
        return {}, f"no voice could be made ({error})"
    return voices, ""
