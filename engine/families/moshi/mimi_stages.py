"""Mimi's two stages, shared by the Moshi frame and the codec alone: a frame of PCM into the
encoder's fixed input buffer and through the encoder (its clock, `mimi_step`, ticked by the
runner first), and codes back through the decoder."""
from __future__ import annotations

import torch

from ...runtime.stages import Stage, StageRunner
from .mimi import Mimi


class MimiStages:
    def __init__(self, runner: StageRunner, mimi: Mimi):
        self.runner, self.mimi = runner, mimi
        # Graphs read their input from a device buffer at a fixed address.
        self.pcm = torch.zeros(1, 1, mimi.frame_size, dtype=torch.float32, device=runner.device)
        self._pcm_flat = self.pcm.view(-1)
        self._ticks = (("mimi_step", mimi.cfg.resample_stride),)

    def encode(self, pcm: torch.Tensor, replay: bool, key: str = "encode") -> torch.Tensor:
        """pcm float32 [frame_size] (a pinned host buffer, or on the device) -> codes [1, n_q, 1]
        (a graph's output when replayed)."""
        self._pcm_flat.copy_(pcm, non_blocking=True)
        return self.runner.run(Stage(key, self._encode, self._ticks), replay)

    def decode(self, key: str, codes: torch.Tensor, replay: bool) -> torch.Tensor:
        """codes [1, q, 1] at a fixed address -> pcm [1, 1, frame_size] on the device."""
        return self.runner.run(Stage(key, lambda: self.mimi.decode_step(codes, self.runner.store)), replay)

    def _encode(self) -> torch.Tensor:
        return self.mimi.encode_step(self.pcm, self.runner.store)
