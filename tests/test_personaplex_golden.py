"""Ours against NVIDIA's PersonaPlex runtime itself: a golden trace the fork's own code recorded
on the bundled demo model (packaging/make_personaplex_golden.py; the fork's commit id is in the
file). Voice prompt, silence, role prompt, silence, then the bundled speech as the user, with a
16-frame context so the KV ring wraps; greedy and sampled with the recorded seed. Tokens must
be identical frame by frame; PCM (the same tokens through each side's Mimi) equal to float
rounding."""
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from engine.options import RuntimeOptions
from engine.persona import Persona
from engine.session import DuplexSession
from tests.session_checks import demo_with

GOLDEN = Path(__file__).resolve().parent / "golden" / "personaplex_demo.safetensors"


@pytest.fixture(scope="module")
def golden():
    with safe_open(str(GOLDEN), "np") as f:
        return f.metadata(), {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not iterable)


@pytest.fixture(scope="module")
def model(golden, tmp_path_factory):
    meta, _ = golden
    return demo_with(tmp_path_factory.mktemp("demo_golden"), {"context": int(meta["context"])})


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_matches_the_personaplex_fork(golden, model, mode):
    meta, trace = golden
    assert len(meta["commit"]) == 40  # the fork's commit the trace came from
    options = RuntimeOptions(seed=int(meta["seed"]), greedy=mode == "greedy")
    session = DuplexSession(model, options, Persona(meta["voice"], meta["role"]))
    out = [session.step(frame) for frame in trace["user_pcm"]]
    tokens = np.stack([frame.tokens for frame in out])
    np.testing.assert_array_equal(tokens, trace[f"{mode}.tokens"])
    expected = trace[f"{mode}.pcm"]
    pcm = np.stack([frame.pcm for frame in out])
    assert np.abs(pcm - expected).max() <= 1e-4 * np.abs(expected).max()
    assert len({tuple(t[1:9]) for t in tokens}) > len(tokens) // 2  # the codes vary: a real test
