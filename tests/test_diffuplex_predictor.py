"""The DiffuPlex predictor and a wake that predicts: the predictor file (format, checks), and
a wake over catch-up frames, the current frame and K masked future positions, on the demo LM
(PersonaPlex-shaped: it predicts the user's codebooks too) with a 12-frame context."""
import dataclasses
import json

import pytest
import torch

from engine.errors import CheckpointError
from engine.families.moshi.diffuplex.predictor import load_predictor, new_predictor, save_predictor
from engine.families.moshi.inputs import LMInputs
from engine.families.moshi.lm import load_lm
from engine.families.moshi.lm.lm_config import from_lm_kwargs
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from tests.lm_reference import our_lm_runner
from tests.test_runtime_wake import _user

K = 3
WAKE = 6  # catch-up frames + the current one + K


@pytest.fixture(scope="module")
def lm():
    kwargs = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    cfg = from_lm_kwargs({**kwargs, "context": 12}, "demo", "demo")
    return load_lm(DEMO_MODEL_DIR / LM_NAME, cfg)


def _trained_looking(lm, seed=1):
    """LoRA B drawn too (a fresh predictor's is zero), so the adapter changes what it touches."""
    predictor = new_predictor(lm.cfg, rank=4, block=K, seed=seed)
    with torch.no_grad():
        for b in predictor.lora_b.values():
            b.normal_(0, 0.05, generator=torch.Generator().manual_seed(seed))
    return predictor.eval()


@torch.no_grad()
def test_a_predicting_wake_leaves_history_as_single_steps(lm):
    single, woken = our_lm_runner(lm, True, 0, wake=WAKE), our_lm_runner(lm, True, 0, wake=WAKE)
    predictor = _trained_looking(lm)
    tokens, generated = [], []
    for i in range(36):
        tokens.append(single.lm_frame(LMInputs(_user(i)))[1])
        generated.append(single.last_generated().clone())
    woken.lm_frame(LMInputs(_user(0)))  # the priming frame
    i, predictions = 1, []
    while i < 36:
        n = min(1 + i % 3, 36 - i)  # 1 to 3 real frames, then K predicted
        frames = [LMInputs(_user(j), generated=generated[j]) for j in range(i, i + n - 1)]
        out = woken.wake(frames + [LMInputs(_user(i + n - 1))], predictor, K)
        i += n
        assert torch.equal(out, tokens[i - 1]), f"frame {i - 1}"
        predictions.append(_plan(woken))
    assert all(g.shape == (K, 1 + lm.cfg.dep_q) and c.shape == (K,) for g, c in predictions)
    assert all(((c > 0) & (c <= 1)).all() for _, c in predictions)
    for name in ("lm.tokens", "lm.forced", "lm.slot", "lm.transformer.pos"):
        assert torch.equal(single.store[name], woken.store[name]), name
    # The history the next steps read is the single steps' (the predicted positions' KV lies
    # past the position counter): the same tokens from here on.
    for j in range(36, 44):
        assert torch.equal(woken.lm_frame(LMInputs(_user(j)))[1], single.lm_frame(LMInputs(_user(j)))[1]), j


@torch.no_grad()
def test_the_adapter_and_the_mask_act_only_where_inputs_are_unknown(lm):
    def predict(predictor):
        runner = our_lm_runner(lm, True, 0, wake=WAKE)
        for i in range(8):
            runner.lm_frame(LMInputs(_user(i)))
        return runner.wake([LMInputs(_user(8))], predictor, K), _plan(runner)

    base = _trained_looking(lm)
    out, (generated, confidence) = predict(base)
    # The user's acoustic codes of this frame land in the next frame's tokens: a prediction
    # holds them as they are (teacher-forced), not as sampled.
    acoustic = slice(2 + lm.cfg.model_q, 1 + lm.cfg.dep_q)
    assert torch.equal(generated[0, acoustic], _user(8)[1:])
    plain_out, (_, plain) = predict(_trained_looking(lm).requires_grad_(False).apply(_zero_lora))
    assert torch.equal(out, plain_out)  # the current frame: no adapter
    assert not torch.equal(confidence, plain)  # the future: the adapter
    # The staircase: the user's semantic code of this frame is the next position's input (PersonaPlex
    # takes it a frame late), so its MASK is first used two positions ahead.
    semantic = 1 + lm.cfg.model_q
    moved = _trained_looking(lm)
    with torch.no_grad():
        moved.mask_embeddings[semantic] += 1.0
    _, (_, shifted) = predict(moved)
    assert shifted[0] == confidence[0]
    assert shifted[1] != confidence[1]


def _plan(runner):
    """Every frame the last wake planned: (generated [K, 1 + dep_q], confidence [K])."""
    rows = [runner.planned(f) for f in range(K)]
    with pytest.raises(ValueError, match="planned 3"):
        runner.planned(K)
    return torch.stack([g for g, _ in rows]), torch.stack([c for _, c in rows])


def _zero_lora(module):
    for name, parameter in module.named_parameters():
        if name.startswith("lora_b"):
            parameter.zero_()


def test_predictor_files_round_trip_and_name_their_problems(lm, tmp_path):
    predictor = _trained_looking(lm)
    path = tmp_path / "adapter.safetensors"
    save_predictor(predictor, path)
    loaded = load_predictor(path, lm.cfg)
    assert loaded.spec == predictor.spec
    assert all(torch.equal(loaded.state()[k], v) for k, v in predictor.state().items())
    other = dataclasses.replace(lm.cfg, dim=64, num_heads=4)
    with pytest.raises(CheckpointError, match=r"adapter\.safetensors: .*dim 32, this model has 64"):
        load_predictor(path, other)
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match=r"junk\.safetensors: not a readable"):
        load_predictor(tmp_path / "junk.safetensors", lm.cfg)
    from safetensors.torch import save_file
    save_file({"mask_embeddings": torch.zeros(17, 32)}, str(tmp_path / "bare.safetensors"))
    with pytest.raises(CheckpointError, match=r"bare\.safetensors: no DiffuPlex metadata"):
        load_predictor(tmp_path / "bare.safetensors", lm.cfg)
    state = predictor.state()
    state["lora.qkv.a"] = state["lora.qkv.a"][:, :2].contiguous()
    save_file(state, str(tmp_path / "cut.safetensors"), metadata={"diffuplex": predictor.spec.metadata()})
    with pytest.raises(CheckpointError, match=r"cut\.safetensors: key lora\.qkv\.a has shape"):
        load_predictor(tmp_path / "cut.safetensors", lm.cfg)
    runner = our_lm_runner(lm, True, 0, wake=WAKE)
    runner.lm_frame(LMInputs(_user(0)))
    runner.lm_frame(LMInputs(_user(1)))
    with pytest.raises(ValueError, match="blocks of 1..3"):
        runner.wake([LMInputs(_user(2))], predictor, K + 1)
