"""Mimi alone, frame by frame (the `codec` command): the same stage runner and the same fast
path as a conversation, with the same runtime options."""
from __future__ import annotations

import numpy as np
import torch

from ...files.finite import finite_pcm
from ...options import RuntimeOptions
from ...runtime.stages import StageRunner
from ...runtime.waiting import wait_for
from ...state.placement import new_store
from .mimi import Mimi
from .mimi_stages import MimiStages

_KEYS = ("encode", "codec_decode")


class CodecSession:
    def __init__(self, mimi: Mimi, options: RuntimeOptions | None = None):
        options = options or RuntimeOptions()
        self.mimi = mimi
        self.runner = StageRunner(new_store(mimi.regions(), mimi.device, options), mimi.device, None, options)
        self._stages = MimiStages(self.runner, mimi)
        self._pcm_out = torch.empty(mimi.frame_size, dtype=torch.float32, pin_memory=mimi.device.type == "cuda")
        self.nonfinite_samples = 0  # replaced as a conversation's are (engine/files/finite.py)

    @torch.no_grad()
    def roundtrip(self, pcm: np.ndarray) -> np.ndarray:
        """One frame, float32 [frame_size]: encoded with every codebook, decoded back."""
        pcm, replaced = finite_pcm(np.asarray(pcm))
        self.nonfinite_samples += replaced
        x = self.mimi.check_pcm(pcm, self.mimi.frame_size)  # checked, on the device
        replay = self.runner.may_replay(_KEYS)  # the decode graph reads the encode graph's codes
        codes = self._stages.encode(x, replay)
        out = self._stages.decode("codec_decode", codes, replay)
        self._pcm_out.copy_(out.view(-1), non_blocking=True)
        wait_for(self.mimi.device)
        return self._pcm_out.numpy().copy()

    def close(self) -> None:
        self.runner.close()
