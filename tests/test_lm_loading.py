"""Loading: config.json parsing, official key names at full size, locating checkpoints, and
errors that name the file and the key."""
import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.errors import CheckpointError
from engine.families.moshi.lm import MoshiLM
from engine.families.moshi.lm.lm_config import CONFIGS, from_lm_kwargs, to_lm_kwargs
from engine.files.paths import DEMO_MODEL_DIR, TOKENIZER_NAME
from engine.loading import locate
from engine.loading.library.listing import READY, list_models
from engine.loading.models import load_model
from engine.loading.safetensors_files import official_layout
from tests.lm_reference import make_reference_lm, save_official, small_lm_kwargs


@pytest.mark.parametrize("name,dep_q", [("moshiko", 8), ("personaplex", 16)])
def test_parameter_names_and_shapes_are_the_official_keys(name, dep_q):
    """At full 7B size (on the meta device): our state dict is the reference's on-disk layout."""
    from moshi.models.lm import LMModel
    from moshi.models.loaders import _lm_kwargs
    ref = LMModel(**{**_lm_kwargs, "dep_q": dep_q}, device="meta")
    official = {k: tuple(v.shape) for k, v in official_layout(ref.state_dict()).items()}
    with torch.device("meta"):
        ours = MoshiLM(CONFIGS[name])
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == official


def test_reference_lm_kwargs_parse_to_the_named_config():
    from moshi.models.loaders import _lm_kwargs
    assert from_lm_kwargs(dict(_lm_kwargs), "config.json", "moshiko") == CONFIGS["moshiko"]
    personaplex = from_lm_kwargs({**_lm_kwargs, "dep_q": 16}, "config.json", "personaplex")
    assert personaplex == CONFIGS["personaplex"] and personaplex.variant == "personaplex"
    assert personaplex.attention_window == 2999 and CONFIGS["moshiko"].attention_window == 3000


def test_lm_kwargs_round_trip():
    cfg = load_model("demo").cfg
    assert from_lm_kwargs(to_lm_kwargs(cfg), "x", cfg.name) == cfg
    shipped = dataclasses.replace(cfg, silence_tokens=CONFIGS["demo"].silence_tokens,
                                  sine_tokens=CONFIGS["demo"].sine_tokens)
    assert shipped == CONFIGS["demo"]


@pytest.mark.parametrize("change,key", [
    ({"norm": "layer_norm"}, "norm"),
    ({"depformer_pos_emb": "sin"}, "depformer_pos_emb"),
    ({"conditioners": {"x": {}}}, "conditioners"),
    ({"flux_capacitor": 1}, "flux_capacitor"),
    ({"dim": "big"}, "dim"),
    ({"delays": [0, 1]}, "delays"),
])
def test_bad_config_values_name_the_key(change, key):
    from moshi.models.loaders import _lm_kwargs
    with pytest.raises(CheckpointError, match=rf"config\.json.*{key}"):
        from_lm_kwargs({**_lm_kwargs, **change}, "config.json", "x")


def test_missing_config_key_is_named():
    from moshi.models.loaders import _lm_kwargs
    kwargs = dict(_lm_kwargs)
    del kwargs["depformer_dim"]
    with pytest.raises(CheckpointError, match="missing key depformer_dim"):
        from_lm_kwargs(kwargs, "config.json", "x")


def test_demo_model():
    model = load_model("demo")
    assert "untrained" in model.name
    assert model.variant == "personaplex" and model.cfg.dep_q == 16 and list(model.voices) == ["DEMO"]
    assert model.device == torch.device("cpu") and model.lm.dtype == torch.float32
    assert model.mimi.cardinality == model.cfg.card
    assert sum(p.stat().st_size for p in DEMO_MODEL_DIR.rglob("*") if p.is_file()) < 10 * 2 ** 20


@pytest.fixture
def demo_copy(tmp_path):
    directory = tmp_path / "ckpt"
    shutil.copytree(DEMO_MODEL_DIR, directory)
    return directory


def _edit_weights(directory, edit):
    path = directory / locate.LM_NAME
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.pop("text_linear.weight"), r"model\.safetensors: missing key text_linear\.weight"),
    (lambda t: t.update(extra=torch.zeros(1)), r"model\.safetensors: unexpected key extra"),
    (lambda t: t.update({"out_norm.alpha": torch.ones(1, 1, 7)}), r"model\.safetensors: key out_norm\.alpha has shape"),
    (lambda t: t["emb.3.weight"].fill_(float("nan")), r"model\.safetensors: key emb\.3\.weight holds NaN"),
])
def test_bad_weights_name_file_and_key(demo_copy, edit, message):
    _edit_weights(demo_copy, edit)
    with pytest.raises(CheckpointError, match=message):
        load_model(demo_copy)


@pytest.mark.parametrize("name,content,message", [
    (locate.LM_NAME, b"garbage", r"model\.safetensors: not a readable safetensors file"),
    (TOKENIZER_NAME, b"garbage", r"tokenizer_spm_32k_3\.model: not a SentencePiece model"),
    ("config.json", b"{not json", r"config\.json: not valid JSON"),
    ("voices/DEMO.pt", b"garbage", r"DEMO\.pt"),
])
def test_bad_files_are_named(demo_copy, name, content, message):
    (demo_copy / name).write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        model = load_model(demo_copy)
        model.load_voice("DEMO")


def test_missing_files_are_named(demo_copy):
    (demo_copy / TOKENIZER_NAME).unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer_spm_32k_3\.model: file not found"):
        load_model(demo_copy)
    (demo_copy / locate.LM_NAME).unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: file not found"):
        load_model(demo_copy)


def test_lm_must_agree_with_the_codec(demo_copy):
    kwargs = small_lm_kwargs(card=64)  # the demo Mimi has 2048 codes per codebook
    save_official(make_reference_lm(kwargs), demo_copy / locate.LM_NAME)
    (demo_copy / "config.json").write_text(json.dumps(kwargs))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: the LM expects 64 codes .* Mimi has 2048"):
        load_model(demo_copy)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, demo_copy):
    """A Hugging Face cache holding the demo files as a known repository (no config.json,
    so the named 7B config applies) and as an unknown one."""
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    for repo, keep_config in (("kyutai/moshiko-pytorch-bf16", False), ("someone/tiny-duplex", True)):
        entry = cache / ("models--" + repo.replace("/", "--"))
        shutil.copytree(demo_copy, entry / "snapshots" / "abc123")
        if not keep_config:
            (entry / "snapshots" / "abc123" / "config.json").unlink()
        (entry / "refs").mkdir()
        (entry / "refs" / "main").write_text("abc123")
    other = cache / "models--someone--text-llm" / "snapshots" / "1"
    other.mkdir(parents=True)
    (other / locate.LM_NAME).write_bytes(b"")  # not a duplex model: not listed
    (other / "config.json").write_text("{}")
    return cache


def test_locating_checkpoints(hf_cache, demo_copy):
    snapshot = hf_cache / "models--someone--tiny-duplex" / "snapshots" / "abc123"
    assert locate.resolve("demo") == (DEMO_MODEL_DIR, None)
    assert locate.resolve(demo_copy) == (demo_copy, None)
    assert locate.resolve(demo_copy / locate.LM_NAME) == (demo_copy, None)
    assert locate.resolve("someone/tiny-duplex") == (snapshot, "someone/tiny-duplex")
    assert locate.resolve(snapshot) == (snapshot, "someone/tiny-duplex")
    assert locate.resolve(snapshot.parent.parent) == (snapshot, "someone/tiny-duplex")
    found = {e.name: e.location for e in list_models(hf_cache) if e.state == READY}
    assert found == {"demo": DEMO_MODEL_DIR, "someone/tiny-duplex": snapshot,
                     "kyutai/moshiko-pytorch-bf16": snapshot.parents[2] / "models--kyutai--moshiko-pytorch-bf16"
                     / "snapshots" / "abc123"}
    assert load_model("someone/tiny-duplex").name == "someone/tiny-duplex"


def test_known_repository_without_config_uses_its_named_config(hf_cache):
    with pytest.raises(CheckpointError, match=r"moshiko-pytorch-bf16/.*model\.safetensors: missing key"):
        load_model("kyutai/moshiko-pytorch-bf16")


def test_uncached_repository_is_not_downloaded(hf_cache):
    with pytest.raises(CheckpointError, match="not downloaded yet.*duplexcadence download kyutai/moshika-pytorch-bf16"):
        load_model("kyutai/moshika-pytorch-bf16")
    with pytest.raises(CheckpointError, match="no such directory"):
        load_model("/no/such/place")
