"""A backbone wake over several frames (the unit DiffuPlex's catch-up builds on): frames whose
tokens are already known only write history, in one temporal-transformer call, and leave it as
single steps would. The demo LM with a 12-frame context, so the KV ring wraps."""
import json

import pytest
import torch

from engine.families.moshi.inputs import LMInputs
from engine.families.moshi.lm import load_lm
from engine.families.moshi.lm.lm_config import from_lm_kwargs
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from tests.lm_reference import our_lm_runner

FRAMES = 40
WAKE = 4


@pytest.fixture(scope="module")
def lm():
    kwargs = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    cfg = from_lm_kwargs({**kwargs, "context": 12}, "demo", "demo")
    return load_lm(DEMO_MODEL_DIR / LM_NAME, cfg)


def _user(i: int) -> torch.Tensor:
    return torch.randint(0, 2048, (8,), generator=torch.Generator().manual_seed(i))


@torch.no_grad()
def test_a_catch_up_wake_leaves_the_history_single_steps_leave(lm):
    single, woken = our_lm_runner(lm, True, 0, wake=WAKE), our_lm_runner(lm, True, 0, wake=WAKE)
    tokens, generated = [], []
    for i in range(FRAMES):
        tokens.append(single.lm_frame(LMInputs(_user(i)))[1])
        generated.append(single.last_generated().clone())
    woken_tokens = [woken.lm_frame(LMInputs(_user(0)))[1]]  # the priming frame runs no wake
    i, sizes = 1, []
    while i < FRAMES:
        n = min(1 + i % WAKE, FRAMES - i)  # wakes of 2, 3, 4, 1, ... positions
        frames = [LMInputs(_user(j), generated=generated[j]) for j in range(i, i + n - 1)]
        last = woken.wake(frames + [LMInputs(_user(i + n - 1))])
        woken_tokens.append(last)
        sizes.append(n)
        i += n
        assert torch.equal(woken_tokens[-1], tokens[i - 1]), f"frame {i - 1}"
    assert max(sizes) == WAKE and woken.frames == single.frames
    for name in single.store.regions:
        a, b = single.store[name], woken.store[name]
        if a.dtype.is_floating_point:  # one call over N rows rounds differently from N calls
            assert (a - b).abs().max() <= 1e-5 * a.abs().max(), name
        else:  # positions, delay lines: exact
            assert torch.equal(a, b), name


def test_a_wake_is_refused_beyond_the_kv_it_keeps(lm):
    runner = our_lm_runner(lm, True, 0, wake=WAKE)
    known = torch.zeros(1 + lm.cfg.dep_q, dtype=torch.long)
    runner.lm_frame(LMInputs(_user(0)))
    with pytest.raises(ValueError, match="sized for 4"):
        runner.wake([LMInputs(_user(1), generated=known)] * WAKE + [LMInputs(_user(2))])
    with pytest.raises(ValueError, match="known generated tokens"):
        runner.wake([LMInputs(_user(1)), LMInputs(_user(2))])
