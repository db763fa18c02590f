"""A voice prompt made from a recording, as Step-Audio2's token2wav makes one (`_prepare_prompt`):
its speech tokens from the ONNX speech tokenizer, its speaker embedding from the ONNX CAM++ model
(both in the model's token2wav folder, run by onnxruntime on the CPU, as CosyVoice's front end
runs them) and its mel for the flow (engine.token2wav.voice_features). The ONNX files are graphs
of standard operators: onnxruntime runs no code from them, and (since 1.25) reads no "external
data" file outside the model's folder."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from ..errors import CheckpointError
from .prompt import Prompt
from .voice_features import prompt_mel, resample, slaney_mel_filters, speaker_fbank, tokenizer_mel

SPEECH_TOKENIZER = "speech_tokenizer_v2_25hz.onnx"
SPEAKER_MODEL = "campplus.onnx"
FILES = (SPEECH_TOKENIZER, SPEAKER_MODEL)
MIN_S, MAX_S = 1.0, 30.0
"""A recording's bounds: under a second says too little of a voice; the tokenizer reads at most
30 s at once."""


@dataclasses.dataclass(frozen=True)
class Recording:
    """A voice recording at its own rate: the first channel (what the tokenizer and speaker model
    hear) and the channels' mean (what the flow's mel is made from)."""
    first: torch.Tensor
    mean: torch.Tensor
    rate: int

    @classmethod
    def read(cls, path: Path, seconds: float | None = None) -> Recording:
        """The file, or its first `seconds`; a one-line ValueError naming it when it cannot serve."""
        try:
            info = sf.info(str(path))
            frames = info.frames if seconds is None else min(info.frames, round(seconds * info.samplerate))
            if not 8000 <= info.samplerate <= 192000 or frames > MAX_S * info.samplerate:
                raise ValueError(f"{path}: a voice recording is {MIN_S:g}-{MAX_S:g} s at 8-192 kHz "
                                 f"({info.frames / max(info.samplerate, 1):.1f} s at {info.samplerate} Hz)")
            data, rate = sf.read(str(path), frames=frames, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError, OSError) as error:
            raise ValueError(f"{path}: not a readable audio file ({error})") from None
        if len(data) < MIN_S * rate:
            raise ValueError(f"{path}: {len(data) / rate:.1f} s; a voice recording needs at least {MIN_S:g} s")
        if not np.isfinite(data).all():
            raise ValueError(f"{path}: holds NaN or infinite samples")
        samples = torch.from_numpy(data)
        return cls(samples[:, 0].clone(), samples.mean(dim=1), rate)


class VoiceFrontEnd:
    """The two ONNX models of a token2wav folder, open while voices are made from recordings."""

    def __init__(self, folder: Path):
        try:
            import onnxruntime
        except ImportError:
            raise CheckpointError("a voice from a recording needs onnxruntime (pip install onnxruntime)") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.sessions = {}
        for name in FILES:
            path = Path(folder) / name
            try:
                self.sessions[name] = onnxruntime.InferenceSession(str(path), sess_options=options,
                                                                   providers=["CPUExecutionProvider"])
            except Exception as error:  # onnxruntime raises its own exception types for a bad file
                why = " ".join(str(error).split())
                raise CheckpointError(f"{path}: not an ONNX model onnxruntime can run ({why})") from None
        self.tokenizer_filters = slaney_mel_filters(16000, 400, 128)
        self.flow_filters = slaney_mel_filters(24000, 1920, 80, 0.0, 8000.0)

    def prompt(self, recording: Recording, up_rate: int = 2) -> Prompt:
        """The prompt the stock runtime prepares from this recording: tokens [1, T], speaker
        [1, 192], mel [1, up_rate * T, 80] (cut, or its last frame repeated, to that length)."""
        speech = resample(recording.first, recording.rate, 16000)
        mel = tokenizer_mel(speech, self.tokenizer_filters)
        tokens = self._run(SPEECH_TOKENIZER, mel[None].numpy(), np.array([mel.shape[1]], dtype=np.int32))
        fbank = speaker_fbank(speech)
        speaker = self._run(SPEAKER_MODEL, (fbank - fbank.mean(dim=0, keepdim=True))[None].numpy())
        flow_mel = prompt_mel(resample(recording.mean, recording.rate, 24000), self.flow_filters)
        tokens = torch.from_numpy(np.asarray(tokens)).reshape(1, -1).long()
        frames = tokens.shape[1] * up_rate
        flow_mel = torch.cat([flow_mel, flow_mel[-1:].expand(max(frames - len(flow_mel), 0), -1)])[:frames]
        prompt = Prompt(tokens, torch.from_numpy(np.asarray(speaker, dtype=np.float32)).reshape(1, -1), flow_mel[None])
        prompt.check(up_rate)
        return prompt

    def _run(self, name: str, *inputs: np.ndarray) -> np.ndarray:
        session = self.sessions[name]
        feeds = {spec.name: value for spec, value in zip(session.get_inputs(), inputs)}
        try:
            return session.run(None, feeds)[0]
        except Exception as error:
            why = " ".join(str(error).split())
            raise CheckpointError(f"{name}: failed on the voice recording's features ({why})") from None
