"""MiniCPM-o in bf16 on the CPU stays within the reference's own bf16 noise: our family loaded in bf16,
teacher-forced through the golden's fp32 runs (tests/minicpmo_forced.py), is no farther from the fp32
reference than the reference itself, loaded as the demo loads it for the GPU (fp32, then .bfloat16()) and
forced the same way (packaging/minicpmo_golden_bf16.py). As bench/fidelity.py: per step the relative L2
error of the logits and the top-1 agreement, with the logits' and log-probabilities' largest errors, a KL
divergence and the recorded token's log-probability; the LLM's, the TTS head's and the encoder's rows."""
from __future__ import annotations

import pytest
import torch

from engine.families.minicpmo.model import load
from tests import minicpmo_forced as forcing

RUNS = forcing.BF16_RUNS


@pytest.fixture(scope="module")
def trace():
    return forcing.load_trace()


@pytest.fixture(scope="module")
def reference(trace):
    return forcing.fidelity(forcing.reference_bf16(trace), trace, RUNS)


def test_the_reference_bf16_noise_is_recorded_and_worth_bounding(reference):
    meta = forcing.META
    assert reference["llm"]["steps"] == sum(sum(steps) for steps in meta["bf16"]["steps"].values())
    assert reference["tts"]["steps"] == 26 * sum(len(meta["runs"][run]["units"]) for run in RUNS)
    # bf16 moves the tiny model's logits by a few tenths of a percent, and sometimes its argmax.
    for part in ("llm", "tts", "encoder"):
        assert 1e-3 < reference[part]["rel_err_mean"] < 1e-2, part
    assert 0.9 < reference["llm"]["top1_agreement"] < 1 and 0.9 < reference["tts"]["top1_agreement"] < 1


def test_the_bounds_refuse_twice_the_reference_noise(trace, reference):
    """A candidate whose every error is twice the reference bf16's fails them: the bounds can tell."""
    doubled = {}
    for key, value in forcing.reference_bf16(trace).items():
        fp32 = key.replace("logits_at_top", "logits_top_values")
        if value.is_floating_point() and fp32 in trace:
            value = trace[fp32] + 2 * (value - trace[fp32])
        doubled[key] = value
    refused = forcing.within_reference_noise(forcing.fidelity(doubled, trace, RUNS), reference)
    assert {" ".join(line.split()[:2]) for line in refused} >= {
        "llm rel_err_mean", "llm kl_mean", "tts rel_err_mean", "encoder rel_err_mean"}, refused


def test_ours_in_bf16_on_the_cpu_is_within_the_reference_bf16_noise(trace, reference):
    model = load(forcing.FOLDER, None, torch.device("cpu"), torch.bfloat16)
    ours = {}
    for run in RUNS:
        ours.update(forcing.forced(model, trace, run))
    mine = forcing.fidelity(ours, trace, RUNS)
    print(forcing.format_fidelity(mine, reference))
    assert mine["llm"]["steps"] == reference["llm"]["steps"] and mine["tts"]["steps"] == reference["tts"]["steps"]
    exceeded = forcing.within_reference_noise(mine, reference)
    assert not exceeded, exceeded
