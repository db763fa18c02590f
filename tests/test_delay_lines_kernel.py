"""The delay lines' kernels (engine.kernels.delay_lines) under Triton's interpreter on the CPU
(or on CUDA): frame after frame of outside tokens, beginnings and commits, the same tokens,
marks and counter as the torch formulas (engine.ops.delays), for Moshi (lead 0) and
PersonaPlex (lead 1)."""
from unittest import mock

import pytest
import torch

from engine.families.moshi.lm.lm_config import CONFIGS
from engine.families.moshi.lm.token_delays import DelayLines
from engine.ops import delays as ops_delays
from engine.state import FullStore
from tests.triton_device import triton_device


@pytest.fixture(scope="module")
def device() -> str:
    return triton_device()


def _conversation(lines: DelayLines, device: str, kernels: bool, frames: int) -> list:
    cfg = lines.cfg
    store = FullStore(lines.regions(), device)
    gen = torch.Generator().manual_seed(5)
    seen = []
    with mock.patch.object(ops_delays.dispatch, "use_triton", lambda x: kernels):
        for f in range(frames):
            user = torch.randint(0, cfg.card, (cfg.user_q,), generator=gen).to(device)
            lines.force(store, 1 + cfg.model_q, user)
            if f % 3 == 0:  # prompt-like frames: the model's codes and text from outside too
                lines.force(store, 1, torch.randint(0, cfg.card, (cfg.model_q,), generator=gen).to(device))
                lines.force(store, 0, torch.randint(0, cfg.text_card, (1,), generator=gen).to(device))
            began = lines.begin_frame(store)
            generated = torch.randint(0, cfg.card, (1 + cfg.dep_q,), generator=gen).to(device)
            out = lines.commit(store, generated)
            seen.append([t.cpu().clone() for t in (*began, out, store[lines.tokens_region], store[lines.forced_region],
                                                   store[lines.slot_region])])
    return seen


@pytest.mark.parametrize("name", ["moshiko", "personaplex"])
def test_frames_keep_the_same_tokens_as_the_torch_formulas(device, name):
    lines = DelayLines(CONFIGS[name], "lm")
    want = _conversation(lines, "cpu", kernels=False, frames=9)
    got = _conversation(lines, device, kernels=True, frames=9)
    for f, (g, w) in enumerate(zip(got, want)):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and torch.equal(a, b), f"frame {f}"
