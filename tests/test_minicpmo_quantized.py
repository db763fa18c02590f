"""MiniCPM-o in int8 and int4 (engine/families/minicpmo/quantized.py), on the CPU: the LLM's and the
TTS's products, the LLM's and TTS's text tables and the audio encoder's layers are quantized as they are
read, the memory plan counts what is kept, and the model teacher-forced through the golden's fp32
runs (tests/minicpmo_forced.py) stays near it: int8 within a few times the reference bf16's own
error, int4 within the bounds below (measured on this tiny random model: LLM logits' mean relative
error 0.0046 int8 and 0.060 int4 against bf16's 0.0032; TTS head 0.0048 and 0.013 against 0.0036;
the encoder's rows, int8 in both, 0.011 against 0.0029). `offline` runs in each format."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cli.commands import main
from engine.families.minicpmo.model import load, plan_memory
from engine.families.minicpmo.quantized import is_product
from engine.ops.linear import Int4Weight, Int8Rows, Int8Weight
from tests import minicpmo_forced as forcing

BOUNDS = {  # format: (LLM mean relative error, LLM top-1 agreement, TTS mean relative error)
    "int8": (0.01, 0.9, 0.01),
    "int4": (0.1, 0.6, 0.03),
}
ENCODER_BOUND = 0.02
"""The encoder rows' mean relative error, both formats (its layers are int8 in both)."""


@pytest.fixture(scope="module")
def trace():
    return forcing.load_trace()


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_products_plan_and_fidelity(weights, trace):
    check_quantized(weights, trace, torch.device("cpu"))


def check_quantized(weights: str, trace: dict, device: torch.device) -> dict:
    """The checks above on `device` (tests/gpu runs them on CUDA, through the fused kernels);
    returns the fidelity figures."""
    model = load(forcing.FOLDER, None, device, torch.bfloat16, weights=weights)
    kind = Int8Weight if weights == "int8" else Int4Weight
    products = [key for key in model.weights_by_name if is_product(key)]
    assert products and all(isinstance(model.weights_by_name[key], kind) for key in products)
    assert any(key.startswith("tts.") for key in products) and "llm.lm_head.weight" in products
    assert all(isinstance(model.weights_by_name[key], Int8Rows)
               for key in ("llm.model.embed_tokens.weight", "tts.emb_text.weight"))
    encoder = [f"apm.layers.0.{key}.weight" for key in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                         "self_attn.out_proj", "fc1", "fc2")]
    assert all(isinstance(model.weights_by_name[key], Int8Weight) for key in encoder)
    assert model.weights == model.weights_option == weights
    assert plan_memory(forcing.FOLDER, None, weights, "cpu").weight_bytes < plan_memory(
        forcing.FOLDER, None, "bf16", "cpu").weight_bytes

    ours = {}
    for run in forcing.BF16_RUNS:
        ours.update(forcing.forced(model, trace, run))
    got = forcing.fidelity(ours, trace, forcing.BF16_RUNS)
    llm_err, llm_top1, tts_err = BOUNDS[weights]
    assert got["llm"]["rel_err_mean"] <= llm_err and got["llm"]["top1_agreement"] >= llm_top1, got["llm"]
    assert got["tts"]["rel_err_mean"] <= tts_err, got["tts"]
    assert got["encoder"]["rel_err_mean"] <= ENCODER_BOUND, got["encoder"]
    return got


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_offline_in_each_format(weights, tmp_path):
    folder = shutil.copytree(forcing.FOLDER, tmp_path / "MiniCPM-o-4_5")
    pcm = np.random.default_rng(1).normal(0, 0.1, 16000 * 5).astype(np.float32)
    sf.write(tmp_path / "in.wav", pcm, 16000)
    out, transcript = tmp_path / "out.wav", tmp_path / "out.json"
    assert main(["offline", "--model", str(folder), "--input", str(tmp_path / "in.wav"), "--output", str(out),
                 "--transcript", str(transcript), "--device", "cpu", "--weights", weights, "--seed", "3"]) == 0
    reply, rate = sf.read(out, dtype="float32")
    assert abs(len(reply) / rate - 5.0) < 0.08
    assert "words" in json.loads(transcript.read_text())
