"""The PersonaPlex path: 16 depformer steps (8 model + 8 user codebooks), user codebooks
teacher-forced from the microphone, voice and role prompts replayed before the conversation.

Matched behaviour: NVIDIA/personaplex's `LMGen` (step, step_embeddings, step_system_prompts),
restated on moshi 0.2.13 layers in tests/lm_reference.PersonaPlexReference, which reaches the
corners a trace cannot (partial forcing, the context quirk). The fork itself is the reference
of tests/test_personaplex_golden.py.
"""
import pytest
import torch

from engine.errors import CheckpointError
from engine.families.moshi.lm import load_lm, load_voice
from engine.families.moshi.lm.lm_config import PROMPT_TOKENS_KEY, from_lm_kwargs
from engine.families.moshi.prompts import replay_prompts
from tests.lm_reference import (
    PersonaPlexReference,
    make_reference_lm,
    our_lm_runner,
    our_lm_step,
    personaplex_context,
    save_official,
    small_lm_kwargs,
)

CONTEXT = 20  # prompts + conversation run past it: the KV ring wraps
SILENCE, SINE = [5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27]
ROLE = [7, 9, 11]
FRAMES = 30


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    kwargs = small_lm_kwargs(dep_q=16, context=CONTEXT)
    ref_lm = make_reference_lm({**kwargs, "context": personaplex_context(CONTEXT)}, seed=5)
    directory = tmp_path_factory.mktemp("personaplex")
    save_official(ref_lm, directory / "model.safetensors")
    cfg = from_lm_kwargs({**kwargs, PROMPT_TOKENS_KEY: {"silence": SILENCE, "sine": SINE}}, "test", "pp")
    g = torch.Generator().manual_seed(6)
    voice_path = directory / "V1.pt"
    torch.save({"embeddings": torch.randn(6, 1, 1, kwargs["dim"], generator=g),
                "cache": torch.randint(0, kwargs["card"], (1, 17, 4), generator=g)}, voice_path)
    user = torch.randint(0, kwargs["card"], (FRAMES, 8), generator=g)
    return cfg, ref_lm, directory, voice_path, user


def run_reference(ref_lm, voice_path, user, greedy, prompts, seed=13):
    torch.manual_seed(seed)
    ref = PersonaPlexReference(ref_lm, greedy)
    if prompts != "none":
        voice = torch.load(voice_path, weights_only=True) if prompts == "voice+role" else None
        ref.system_prompts(voice and voice["embeddings"], voice and voice["cache"], ROLE, SILENCE, SINE)
    out = [ref.step(codes.tolist()) for codes in user]
    ref.close()
    return [None if t is None else t.tolist() for t in out]


def run_ours(cfg, directory, voice_path, user, greedy, prompts, seed=13):
    lm = load_lm(directory / "model.safetensors", cfg)
    runner = our_lm_runner(lm, greedy, seed)
    with torch.no_grad():
        if prompts != "none":
            voice = load_voice(voice_path, cfg, lm.device, lm.dtype) if prompts == "voice+role" else None
            replay_prompts(runner.frame, voice, ROLE)
        return [None if t is None else t.tolist() for t in (our_lm_step(runner, c) for c in user)]


@pytest.mark.parametrize("greedy,prompts", [(True, "voice+role"), (False, "voice+role"),
                                            (True, "role"), (False, "none")])
def test_tokens_match_personaplex_reference(setup, greedy, prompts):
    cfg, ref_lm, directory, voice_path, user = setup
    expected = run_reference(ref_lm, voice_path, user, greedy, prompts)
    ours = run_ours(cfg, directory, voice_path, user, greedy, prompts)
    assert ours == expected
    if prompts == "none":  # one start-up frame more than Moshi: the first step only primes
        assert expected[:2] == [None, None] and None not in expected[2:]
    else:
        assert None not in expected


def test_user_codebooks_are_teacher_forced(setup):
    cfg, ref_lm, directory, voice_path, user = setup
    out = run_ours(cfg, directory, voice_path, user, False, "voice+role")
    assert all(len(t) == 17 for t in out)
    # Output frame t carries the user's codes of frame t - 1 (they enter a frame late).
    assert [t[9:] for t in out[1:]] == user[:-1].tolist()
    assert len({tuple(t[1:9]) for t in out}) > FRAMES // 2  # the model's own codes are sampled


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_partial_forcing_matches_reference(setup, greedy):
    """Text and model audio forced while the user's codebooks are left to the depformer (and
    the reverse): the depformer's later steps see the forced tokens, not its own samples."""
    cfg, ref_lm, directory, voice_path, user = setup
    plan = [(None, user[t, :8], t % 7) if t % 3 else (user[t], None, None) for t in range(12)]

    torch.manual_seed(21)
    ref = PersonaPlexReference(ref_lm, greedy)
    expected = [ref.step(None if u is None else u.tolist(), model=None if m is None else m.tolist(), text=x)
                for u, m, x in plan]
    ref.close()
    lm = load_lm(directory / "model.safetensors", cfg)
    runner = our_lm_runner(lm, greedy, 21)
    with torch.no_grad():
        ours = [our_lm_step(runner, u, model=m, text=None if x is None else torch.tensor([x])) for u, m, x in plan]
    assert [None if t is None else t.tolist() for t in ours] == [None if t is None else t.tolist() for t in expected]


def test_context_quirk_matters(setup):
    """With moshi 0.2.13's full window instead of the fork's, tokens differ once the ring wraps."""
    cfg, ref_lm, directory, voice_path, user = setup
    expected = run_reference(ref_lm, voice_path, user, True, "voice+role")
    full_window = make_reference_lm({**small_lm_kwargs(dep_q=16, context=CONTEXT)}, seed=5)
    assert run_reference(full_window, voice_path, user, True, "voice+role") != expected


@pytest.mark.parametrize("content,key", [
    ({"cache": torch.zeros(1, 17, 4, dtype=torch.long)}, "embeddings"),
    ({"embeddings": torch.zeros(3, 1, 1, 64)}, "cache"),
    ({"embeddings": torch.zeros(3, 1, 1, 32), "cache": torch.zeros(1, 17, 4, dtype=torch.long)}, "embeddings"),
    ({"embeddings": torch.zeros(3, 1, 1, 64), "cache": torch.zeros(1, 17, 3, dtype=torch.long)}, "cache"),
    ({"embeddings": torch.full((3, 1, 1, 64), float("nan")),
      "cache": torch.zeros(1, 17, 4, dtype=torch.long)}, "embeddings"),
    ({"embeddings": torch.zeros(3, 1, 1, 64), "cache": torch.full((1, 17, 4), 9999)}, "cache"),
])
def test_bad_voice_files_name_file_and_key(setup, tmp_path, content, key):
    cfg = setup[0]
    path = tmp_path / "bad.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=rf"bad\.pt.*{key}"):
        load_voice(path, cfg, torch.device("cpu"), torch.float32)


class _Payload:
    """Anything that is not a tensor must not be unpickled."""


def test_voice_files_are_loaded_as_tensors_only(setup, tmp_path):
    cfg = setup[0]
    path = tmp_path / "evil.pt"
    torch.save({"embeddings": torch.zeros(3, 1, 1, 64), "cache": torch.zeros(1, 17, 4, dtype=torch.long),
                "extra": _Payload()}, path)
    with pytest.raises(CheckpointError, match=r"evil\.pt: holds code or objects that are not plain tensors"):
        load_voice(path, cfg, torch.device("cpu"), torch.float32)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match=r"junk\.pt"):
        load_voice(tmp_path / "junk.pt", cfg, torch.device("cpu"), torch.float32)
