"""Our Moshi LM and session against the reference runtime (moshi 0.2.13): weights made by the
reference LMModel and saved in the official layout, loaded by ours, same inputs.

Tokens must be identical frame by frame, greedy and sampled (our seeded generator draws the
same random numbers in the same order as the reference's global one); PCM through Mimi must
agree to 1e-4 relative. The `detects_*` tests show the comparison catches a wrong delay, a
wrong key mapping and a wrong sampling detail.
"""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.families.moshi.lm import load_lm
from engine.families.moshi.lm.lm_config import from_lm_kwargs
from engine.files.paths import TOKENIZER_NAME
from engine.loading import locate
from engine.loading.models import load_model
from engine.options import RuntimeOptions
from engine.session import DuplexSession
from tests import mimi_reference
from tests.lm_reference import (
    make_reference_lm,
    our_lm_runner,
    our_lm_step,
    run_moshi_reference,
    save_official,
    small_lm_kwargs,
    write_tokenizer,
)

FRAMES = 48  # the context is 24 frames: the KV ring wraps


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    kwargs = small_lm_kwargs(dep_q=8)
    lm = make_reference_lm(kwargs, seed=0)
    path = tmp_path_factory.mktemp("lm") / locate.LM_NAME
    save_official(lm, path)
    user = torch.randint(0, kwargs["card"], (FRAMES, 8), generator=torch.Generator().manual_seed(1))
    return kwargs, lm, path, user


def run_ours(kwargs, path, user, greedy, seed=0, text=(0.7, 25), audio=(0.8, 250)):
    lm = load_lm(path, from_lm_kwargs(kwargs, "test", "small"))
    runner = our_lm_runner(lm, greedy, seed, text, audio)
    with torch.no_grad():
        return [our_lm_step(runner, codes) for codes in user]


def as_lists(frames):
    return [None if f is None else f.tolist() for f in frames]


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_tokens_match_reference(ref, greedy):
    kwargs, lm, path, user = ref
    expected = as_lists(run_moshi_reference(lm, user, greedy, seed=7))
    assert as_lists(run_ours(kwargs, path, user, greedy, seed=7)) == expected
    assert expected[0] is None and all(t is not None for t in expected[1:])
    assert len({tuple(t[1:]) for t in expected[1:]}) > FRAMES // 2  # the codes vary


def test_detects_wrong_delays(ref):
    kwargs, lm, path, user = ref
    delays = list(kwargs["delays"])
    delays[9] = 1  # the user's semantic codebook one frame late
    expected = as_lists(run_moshi_reference(lm, user, True, seed=0))
    assert as_lists(run_ours({**kwargs, "delays": delays}, path, user, True)) != expected


def test_detects_wrong_key_mapping(ref, tmp_path):
    kwargs, lm, path, user = ref
    tensors = load_file(str(path))
    tensors["depformer_in.1.weight"], tensors["depformer_in.2.weight"] = (
        tensors["depformer_in.2.weight"], tensors["depformer_in.1.weight"])
    swapped = tmp_path / locate.LM_NAME
    save_file(tensors, str(swapped))
    expected = as_lists(run_moshi_reference(lm, user, True, seed=0))
    assert as_lists(run_ours(kwargs, swapped, user, True)) != expected


def test_detects_wrong_sampling_detail(ref):
    kwargs, lm, path, user = ref
    expected = as_lists(run_moshi_reference(lm, user, False, seed=3))
    assert as_lists(run_ours(kwargs, path, user, False, seed=3, text=(0.7, 24))) != expected


def reference_pipeline(mimi, lm, pcm, greedy, seed):
    """The reference's conversation loop: Mimi encode, LMGen.step, Mimi decode, per frame."""
    from moshi.models.lm import LMGen
    gen = LMGen(lm, use_sampling=not greedy)
    torch.manual_seed(seed)
    out = []
    with torch.no_grad(), gen.streaming(1), mimi.streaming(1):
        for frame in pcm.reshape(-1, mimi_reference.FRAME):
            codes = mimi.encode(torch.from_numpy(frame).view(1, 1, -1))
            tokens = gen.step(codes)
            if tokens is None:
                out.append((None, None))
            else:
                out.append((tokens[0, :, 0].tolist(), mimi.decode(tokens[:, 1:9])[0, 0].numpy()))
    return out


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """A checkpoint directory with a small reference LM, Mimi and tokenizer."""
    directory = tmp_path_factory.mktemp("moshi_small")
    mimi_cfg = mimi_reference.small_config()
    mimi = mimi_reference.build_reference(mimi_cfg, num_codebooks=8, seed=2)
    mimi_reference.save_official(mimi, mimi_cfg, directory)
    kwargs = small_lm_kwargs(dep_q=8, card=mimi_cfg["quantizer"]["bins"])
    lm = make_reference_lm(kwargs, seed=4)
    save_official(lm, directory / locate.LM_NAME)
    (directory / "config.json").write_text(json.dumps(kwargs))
    write_tokenizer(directory / TOKENIZER_NAME)
    return directory, mimi, lm


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_session_matches_reference_pipeline(pipeline, greedy):
    directory, mimi, lm = pipeline
    pcm = mimi_reference.varied_audio(40, seed=9)
    expected = reference_pipeline(mimi, lm, pcm, greedy, seed=11)
    session = DuplexSession(load_model(directory), RuntimeOptions(greedy=greedy, seed=11))
    for i, frame in enumerate(pcm.reshape(-1, mimi_reference.FRAME)):
        out = session.step(frame)
        tokens, ref_pcm = expected[i]
        if tokens is None:
            assert out.tokens is None and not out.pcm.any() and out.text == ""
            continue
        assert out.tokens.tolist() == tokens, f"frame {i}"
        scale = np.abs(ref_pcm).max()
        assert scale > 0 and np.abs(out.pcm - ref_pcm).max() <= 1e-4 * scale, f"frame {i}"
