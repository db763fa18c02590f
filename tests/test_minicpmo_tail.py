"""MiniCPM-o's audio, the token-to-audio tail as the conversation drives it, against the reference's
golden tail (packaging/minicpmo_golden_tail.py): DuplexCapability with the stock Step-Audio2 Token2wav
(5 flow steps) on a small random tail and a prepared voice. The tail is written again here from the
trace's seed (its full-size DiT makes flow.pt ~460 MB: too big to ship) and checked against the
recorded digest; the stock's noise tables, drawn when it is built, are handed to ours. Each tail run
replays through MiniCPMOConversation — three silence tokens starting a turn's buffer, 25+3-token
pushes, a turn's last-chunk flush, a break resetting the tail but not the TTS, a short unit padded
in front to a second, a unit too short to sound — and each unit's audio must equal the waveform the
reference returned: it hands back int16 (x * 32767, truncated) / 32768, so ours is quantized the
same way and may differ by one step where fp32 noise crosses a boundary."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from bench.stock_token2wav import write_model_dir
from engine.families.minicpmo import speech_tokens
from engine.families.minicpmo.conversation import MiniCPMOConversation
from engine.families.minicpmo.model import TAIL_FOLDER, VOICE_FILE, load
from engine.families.minicpmo.protocol_settings import UnitSettings
from engine.options import RuntimeOptions
from engine.persona import Persona

GOLDEN = Path(__file__).parent / "golden"
META = json.loads((GOLDEN / "minicpmo_tiny_trace.json").read_text())
TAIL = META["tail"]
STEP = 1 / 32768  # one int16 step of the reference's waveform (its audio here: rms ~600 steps, peaks ~1600)
# Quantized as the reference does, ours may land one step off where fp32 noise crosses a truncation
# boundary: measured (CPU, torch 2.13) on 241 of 438720 samples (0.05%), never more than one step.
# Unquantized, truncation (< 1 step) and the 32767/32768 gain (< 1 step) bound it: measured 1.04 steps.
# One thing wrong is far outside: 4 flow steps instead of 5 is 27 steps off, another noise table 710.
QUANTIZED_TOL, DIFFERING_TOL, RAW_TOL = STEP, 0.005, 2 * STEP


@pytest.fixture(scope="module")
def trace():
    with safe_open(str(GOLDEN / "minicpmo_tiny_trace.safetensors"), framework="pt") as f:
        return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118


def _digest(*modules) -> str:
    """minicpmo_golden_tail.weights_digest (packaging/ is not importable as a package)."""
    digest = hashlib.sha256()
    for module in modules:
        for name, tensor in module.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def model(trace, tmp_path_factory):
    """The tiny checkpoint with the golden's tail and voice in assets/token2wav, loaded by the family."""
    folder = tmp_path_factory.mktemp("minicpmo") / "minicpmo_tiny"
    shutil.copytree(GOLDEN / "minicpmo_tiny", folder)
    tail_folder = folder / TAIL_FOLDER
    tail_folder.mkdir(parents=True)
    flow, hift = write_model_dir(tail_folder, TAIL["seed"], TAIL["flow_yaml"], TAIL["vocoder_yaml"])
    assert _digest(flow, hift) == TAIL["weights_sha256"], "the rebuilt tail is not the recorded one"
    noise = trace["tail.flow_noise"]
    assert torch.equal(flow.decoder.rand_noise[0, :, :noise.shape[1]], noise)
    save_file({k: trace[f"tail.prompt.{k}"] for k in ("tokens", "speaker", "mel")}, str(tail_folder / VOICE_FILE))
    loaded = load(folder, None, torch.device("cpu"), torch.float32)
    (tail_folder / "flow.pt").unlink()  # read now; pytest keeps its last temporary folders, this one 460 MB
    # Tables both runtimes draw when built, not stored in a checkpoint: the stock's are taken.
    loaded.tail.noise = flow.decoder.rand_noise.clone()
    loaded.tail.vocoder.m_source.noise.copy_(hift.m_source.l_sin_gen.sine_waves[0])
    return loaded


def _settings(spec: dict) -> UnitSettings:
    generate, duplex = spec["generate"], spec["spec"].get("duplex", {})
    return UnitSettings(force_listen_count=duplex.get("force_listen_count", 0), decode_mode=generate["decode_mode"],
                        temperature=generate["temperature"], top_k=generate["top_k"], top_p=generate["top_p"],
                        listen_prob_scale=generate["listen_prob_scale"], listen_top_k=generate["listen_top_k"],
                        text_repetition_penalty=generate["text_repetition_penalty"],
                        text_repetition_window_size=generate["text_repetition_window_size"],
                        length_penalty=generate["length_penalty"], sliding_window_mode="off")


def _bias(trace, key: str) -> dict[tuple[int, int], list[tuple[int, float]]]:
    out: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for (unit, step, token), value in zip(trace[f"{key}_at"].tolist(), trace[f"{key}_value"].tolist()):
        out.setdefault((unit, step), []).append((token, value))
    return out


def as_reference_returns(audio: np.ndarray) -> np.ndarray:
    """Token2wav.stream's bytes as _generate_waveform_from_tokens reads them back."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").astype(np.float32) / 32768.0


@pytest.mark.parametrize("run", list(TAIL["runs"]))
def test_a_conversations_audio_is_the_references(run, trace, model, monkeypatch):
    spec = TAIL["runs"][run]
    options = RuntimeOptions(seed=META["seed"])
    generator = torch.Generator().manual_seed(META["seed"])
    conversation = MiniCPMOConversation(model, generator, options, Persona(), settings=_settings(spec))
    at = {"unit": 0, "step": 0, "tts_step": 0}

    # The forcing the golden added from outside: the LLM's on the logits decode receives, the TTS's on its head.
    llm_bias, tts_bias = _bias(trace, f"{run}.bias"), _bias(trace, f"{run}.tts_bias")
    decode, tts_linear, head = conversation.units.decoder.decode, speech_tokens.linear, conversation.tts.head

    def biased_decode(logits, generator):
        for token, value in llm_bias.get((at["unit"], at["step"]), []):
            logits = logits.clone()
            logits[0, token] += value
        at["step"] += 1
        return decode(logits, generator)

    def biased_linear(x, weight):
        out = tts_linear(x, weight)
        if weight is head:
            for token, value in tts_bias.get((at["unit"], at["tts_step"]), []):
                out = out.clone()
                out[..., token] += value
            at["tts_step"] += 1
        return out

    conversation.units.decoder.decode = biased_decode
    monkeypatch.setattr(speech_tokens, "linear", biased_linear)
    spoken: list[list[int]] = []
    generate = conversation.tts.generate

    def recorded_generate(*args, **kwargs):
        spoken.append(list(generate(*args, **kwargs)))
        return spoken[-1]
    conversation.tts.generate = recorded_generate

    conversation.reset(options, lambda: False, None)
    pcm = trace["audio.pcm16"]
    worst = {"raw": 0.0, "quantized": 0.0}
    differing = compared = 0
    for i, facts in enumerate(spec["units"]):
        where = f"{run} unit {i}"
        at.update(unit=i, step=0, tts_step=0)
        spoken.clear()
        if "override" in facts["actions"]:
            conversation.interrupt()
        _, speech, report = conversation.step(pcm[i % len(pcm)].float() / 32768, options, lambda stage: None)
        assert (report.listen, report.text, report.end_of_turn) == (
            facts["is_listen"], facts["text"], facts["end_of_turn"]), where
        recorded = trace.get(f"{run}.u{i}.tts_tokens")
        assert spoken == ([] if recorded is None else [recorded.tolist()]), where
        expected = trace.get(f"{run}.u{i}.wav")
        if expected is None:
            assert speech is None, where
            continue
        got, expected = speech.numpy(), expected.numpy()
        assert got.shape == expected.shape, where
        if facts["padded"]:
            assert not got[:facts["padded"]].any(), where
        quantized = as_reference_returns(got)
        worst["raw"] = max(worst["raw"], float(np.abs(got - expected).max()))
        worst["quantized"] = max(worst["quantized"], float(np.abs(quantized - expected).max()))
        differing, compared = differing + int((quantized != expected).sum()), compared + expected.size
        assert worst["quantized"] <= QUANTIZED_TOL and worst["raw"] <= RAW_TOL, (where, worst)
        assert differing <= DIFFERING_TOL * compared, (where, differing, compared)
    print(f"{run}: max |ours - reference| {worst['raw'] / STEP:.2f} steps; quantized, {differing} of {compared} "
          f"samples one step off")
