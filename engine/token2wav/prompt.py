"""A prepared voice prompt for a token2wav stream: its speech tokens, speaker embedding and mel."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..loading.safetensors_files import read_safetensors


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A voice prompt, prepared: speech tokens [1, Tp] (int), the speaker's CAM++ embedding
    [1, 192] and the prompt's 80-band mel [1, 2 * Tp, 80] (24 kHz, 480-sample hop)."""
    tokens: torch.Tensor
    speaker: torch.Tensor
    mel: torch.Tensor

    @classmethod
    def read(cls, path: str | Path, device: str | torch.device = "cpu") -> Prompt:
        """A prepared prompt saved as safetensors: `tokens` [Tp] or [1, Tp] (int), `speaker`
        [192] or [1, 192], `mel` [2 Tp, 80] or [1, 2 Tp, 80]."""
        tensors = read_safetensors(path)
        missing = [k for k in ("tokens", "speaker", "mel") if k not in tensors]
        if missing:
            raise ValueError(f"{path}: a prepared prompt needs tensors tokens, speaker and mel; missing {missing}")
        prompt = cls(*(tensors[k].to(device).reshape(1, *tensors[k].shape[-(2 if k == "mel" else 1):])
                       for k in ("tokens", "speaker", "mel")))
        try:
            prompt.check()
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        return prompt

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Prompt:
        """On `device`, the embedding and mel in `dtype` (the flow's)."""
        return Prompt(self.tokens.to(device), self.speaker.to(device, dtype), self.mel.to(device, dtype))

    def check(self, up_rate: int = 2) -> None:
        if self.tokens.dim() != 2 or self.tokens.shape[0] != 1 or self.tokens.is_floating_point():
            raise ValueError(f"prompt tokens must be int [1, T], got {tuple(self.tokens.shape)} {self.tokens.dtype}")
        if tuple(self.speaker.shape) != (1, 192):
            raise ValueError(f"prompt speaker embedding must be [1, 192], got {tuple(self.speaker.shape)}")
        frames = self.tokens.shape[1] * up_rate
        if self.mel.dim() != 3 or tuple(self.mel.shape[::2]) != (1, 80) or self.mel.shape[1] != frames:
            raise ValueError(f"prompt mel must be [1, {frames}, 80] ({up_rate} frames per prompt token), "
                             f"got {tuple(self.mel.shape)}")
        # Refused, not repaired: a NaN in either reaches every mel frame the flow makes (the
        # speaker vector conditions them all; the prompt's mel is in the attention's context).
        for name, values in (("speaker embedding", self.speaker), ("mel", self.mel)):
            bad = int(values.numel() - torch.isfinite(values).sum())
            if bad:
                raise ValueError(f"prompt {name} holds {bad} NaN or infinite values")
