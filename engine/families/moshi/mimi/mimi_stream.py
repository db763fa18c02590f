"""A host-side (numpy) stream over one Mimi: frames in, codes out, and back."""
from __future__ import annotations

import numpy as np

from ....state import FullStore
from .codec import Mimi


class MimiStream:
    """Owns a FullStore with all of the model's regions; encode and decode advance
    independently (each side has its own state)."""

    def __init__(self, mimi: Mimi):
        self.mimi = mimi
        self.store = FullStore(mimi.regions(), mimi.device)

    def encode_frame(self, pcm: np.ndarray) -> np.ndarray:
        """float32 [frame_size] -> int64 [num_codebooks]."""
        x = self.mimi.check_pcm(pcm, self.mimi.frame_size)
        return self.mimi.encode_step(x.view(1, 1, -1), self.store)[0, :, 0].cpu().numpy()

    def decode_frame(self, codes: np.ndarray) -> np.ndarray:
        """int [K] -> float32 [frame_size]."""
        c = self.mimi.check_codes(codes, 1)
        return self.mimi.decode_step(c.view(1, -1, 1), self.store)[0, 0].float().cpu().numpy()

    def reset(self) -> None:
        self.store.reset()
