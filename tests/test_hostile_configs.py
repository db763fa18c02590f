"""Hostile or broken config files (issue 25, items 3, 6 and 8): each is refused in one line
naming the file, the key and the bound, before anything the file sizes is allocated."""
import json
import logging
import math

import pytest
import torch

from engine.errors import CheckpointError
from engine.families.moshi.diffuplex.predictor import load_predictor
from engine.families.moshi.mimi import load_mimi
from engine.files.paths import LM_NAME, LM_Q8_NAME, PREDICTOR_NAME
from engine.loading.models import load_model
from engine.token2wav.token2wav_config import read_flow_config
from engine.token2wav.token2wav_loading import load_token2wav
from tests.hostile_files import (
    SMALL_FLOW_YAML,
    assert_named,
    deep_json,
    demo_copy,
    demo_json,
    demo_predictor,
    token2wav_dir,
    write_json,
    write_predictor,
)

BIG = 10**9


def _model_with(tmp_path, **changes):
    folder = demo_copy(tmp_path / "model")
    write_json(folder / "config.json", {**demo_json("config.json"), **changes})
    return folder


@pytest.mark.parametrize("key,value,words", [
    ("dim", BIG, ["dim = 1000000000 is out of range (at most 16384)"]),
    ("context", BIG, ["context = 1000000000 is out of range (at most 16384)"]),
    ("context", 10_000_000, ["context = 10000000 is out of range (at most 16384)"]),
    ("existing_text_padding_id", BIG, ["existing_text_padding_id = 1000000000 is out of range (at most 199)"]),
    ("existing_text_end_padding_id", 200, ["existing_text_end_padding_id = 200 is out of range (at most 199)"]),
    ("num_layers", "32", ["num_layers = '32' must be an integer"]),
    ("hidden_scale", math.nan, ["hidden_scale = nan must be a finite number"]),
    ("num_heads", 3, ["num_heads = 3 does not divide dim = 32"]),
    ("delays", [0] + [BIG] * 16, ["delays[1] = 1000000000 is out of range (at most 1000)"]),
    ("lm_gen_config", json.loads(deep_json(500)), ["nested deeper than 16 levels"]),
])
def test_config_json_values_are_bounded(tmp_path, key, value, words):
    folder = _model_with(tmp_path, **{key: value})
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    assert_named(info.value, folder / "config.json", *words)


def test_a_100k_deep_config_json_is_one_line(tmp_path):
    folder = demo_copy(tmp_path / "model")
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.rstrip()[:-1] + ', "lm_gen_config": ' + deep_json(100_000) + "}")
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    assert_named(info.value, folder / "config.json", "nested deeper than 16 levels")


@pytest.mark.parametrize("key,name", [
    ("moshi_name", "../../../etc/passwd"), ("tokenizer_name", "../../../etc/passwd"),
    ("tokenizer_name", "/etc/passwd"), ("mimi_name", "sub/../../x.safetensors"),
])
def test_file_names_stay_in_the_model_folder(tmp_path, key, name):
    folder = _model_with(tmp_path, **{key: name})
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    assert_named(info.value, folder / "config.json", "outside the model's folder")
    if key != "moshi_name":  # config.json's own check names the key (moshi_name is looked up earlier)
        assert f"{key} = {name!r}" in str(info.value)


def test_a_linked_folder_out_of_the_model_folder_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    folder = _model_with(tmp_path, tokenizer_name="link/tokenizer.model")
    (folder / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError) as info:
        load_model(folder)
    assert_named(info.value, folder / "config.json", "tokenizer_name", "linked folder")


def test_with_both_lm_files_the_loader_says_which_it_loads(tmp_path, caplog):
    folder = demo_copy(tmp_path / "model")
    (folder / LM_Q8_NAME).write_bytes((folder / LM_NAME).read_bytes())
    with caplog.at_level(logging.INFO, logger="engine"):
        load_model(folder)
    lines = [r.getMessage() for r in caplog.records if LM_Q8_NAME in r.getMessage()]
    assert lines == [f"{folder}: both {LM_NAME} and {LM_Q8_NAME} are here; loading {LM_NAME} "
                     f"({LM_NAME} is read first when config.json's moshi_name names no other)"]


def _mimi_with(tmp_path, section, **changes):
    folder = demo_copy(tmp_path / "model")
    config = demo_json("mimi_config.json")
    config[section].update(changes)
    write_json(folder / "mimi_config.json", config)
    return folder


@pytest.mark.parametrize("section,key,value,words", [
    ("quantizer", "bins", BIG, ["quantizer.bins = 1000000000 is out of range (at most 65536)"]),
    ("transformer", "dim_feedforward", BIG,
     ["transformer.dim_feedforward = 1000000000 is out of range (at most 16384)"]),
    ("transformer", "context", BIG, ["transformer.context = 1000000000 is out of range (at most 4096)"]),
    ("seanet", "ratios", [8, 6, 5, 4, 1, 1, 1, 1, 1], ["seanet.ratios has 9 entries (at most 8)"]),
])
def test_mimi_config_values_are_bounded(tmp_path, section, key, value, words):
    folder = _mimi_with(tmp_path, section, **{key: value})
    with pytest.raises(CheckpointError) as info:
        load_mimi(folder)
    assert_named(info.value, folder / "mimi_config.json", *words)


def test_mimi_sizes_that_do_not_fit_the_file_fail_before_allocation(tmp_path):
    folder = _mimi_with(tmp_path, "quantizer", bins=65536, dimension=4096)  # in bounds, 1 GiB of tables
    with pytest.raises(CheckpointError) as info:
        load_mimi(folder)
    assert "has shape" in str(info.value)


BILLION_LAUGHS = """\
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


@pytest.mark.parametrize("text,words", [
    (SMALL_FLOW_YAML.replace("depth: 1", "depth: !ref <flow.decoder.estimator.depth>"),
     ["!ref <flow.decoder.estimator.depth> refers to itself"]),
    ("x: !ref <y>\ny: !ref <x>\n" + SMALL_FLOW_YAML, ["!ref <y> is a cycle (<y> -> <x> -> <y>)"]),
    (SMALL_FLOW_YAML.replace("vocab_size: 300", "vocab_size: {v: !ref <flow>}"), ["!ref <flow> refers to itself"]),
    (SMALL_FLOW_YAML.replace("depth: 1", "depth: -1"),
     ["flow.decoder.estimator.depth = -1 is out of range (at least 1)"]),
    (SMALL_FLOW_YAML.replace("vocab_size: 300", f"vocab_size: {BIG}"),
     ["flow.vocab_size = 1000000000 is out of range (at most 131072)"]),
    (SMALL_FLOW_YAML.replace("hidden_size: 32", f"hidden_size: {BIG}"),
     ["flow.decoder.estimator.hidden_size = 1000000000 is out of range (at most 4096)"]),
    (BILLION_LAUGHS + SMALL_FLOW_YAML, ["more than 64 YAML aliases"]),
    ("x: &x [*x]\n" + SMALL_FLOW_YAML, ["nested deeper than 16 levels once expanded"]),
    ("x: " + "[" * 100_000 + "]" * 100_000 + "\n" + SMALL_FLOW_YAML, ["nested deeper than 16 levels"]),
])
def test_flow_yaml_is_bounded(tmp_path, text, words):
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        read_flow_config(path)
    assert_named(info.value, path, *words)


def test_fewer_aliases_that_expand_a_lot_are_refused_too(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    path = tmp_path / "flow.yaml"
    path.write_text("\n".join(lines) + "\n" + SMALL_FLOW_YAML)  # 48 aliases, 8 * 6 ** 8 values
    with pytest.raises(CheckpointError) as info:
        read_flow_config(path)
    assert_named(info.value, path, "expands to more than 100000 values")


def test_token2wav_sizes_that_do_not_fit_the_weights_fail_before_allocation(tmp_path):
    folder = token2wav_dir(tmp_path / "t2w")
    load_token2wav(folder)  # the folder as made loads
    (folder / "flow.yaml").write_text(SMALL_FLOW_YAML.replace("hidden_size: 32", "hidden_size: 4096")
                                      .replace("depth: 1", "depth: 64"))  # in bounds, ~50 GB of weights
    with pytest.raises(CheckpointError) as info:
        load_token2wav(folder)
    assert_named(info.value, folder / "flow.pt", "missing key decoder.estimator.blocks.1")


def _predictor(tmp_path, metadata, tensors=None):
    meta, own = demo_predictor()
    text = metadata if isinstance(metadata, str) else json.dumps({**meta, **metadata}, allow_nan=True)
    return write_predictor(tmp_path / PREDICTOR_NAME, text, own if tensors is None else tensors)


@pytest.fixture(scope="module")
def demo_cfg():
    from engine.families.moshi.lm.lm_config import from_lm_kwargs
    return from_lm_kwargs(demo_json("config.json"), "config.json", "demo")


@pytest.mark.parametrize("metadata,words", [
    ('"a string"', ["metadata diffuplex must be a JSON object, found str"]),
    ({"base": "demo"}, ["base must be an object, found 'demo'"]),
    ({"training": json.loads(deep_json(200))}, ["nested deeper than 16 levels"]),
    (deep_json(100_000), ["nested deeper than 16 levels"]),
    ({"rank": BIG}, ["rank = 1000000000 is out of range (at most 1024)"]),
    ({"block": BIG}, ["block = 1000000000 is out of range (at most 16)"]),
    ({"block": "4"}, ["block = '4' must be an integer"]),
    ({"alpha": math.nan}, ["alpha = nan must be a finite number"]),
    ({"targets": "qkv"}, ["targets = 'qkv' must be distinct names"]),
])
def test_predictor_metadata_is_checked(tmp_path, demo_cfg, metadata, words):
    path = _predictor(tmp_path, metadata)
    with pytest.raises(CheckpointError) as info:
        load_predictor(path, demo_cfg)
    assert_named(info.value, path, *words)


def test_integer_mask_embeddings_are_refused(tmp_path, demo_cfg):
    _, tensors = demo_predictor()
    tensors["mask_embeddings"] = tensors["mask_embeddings"].to(torch.int64)
    path = _predictor(tmp_path, {}, tensors)
    with pytest.raises(CheckpointError) as info:
        load_predictor(path, demo_cfg)
    assert_named(info.value, path, "mask_embeddings has dtype torch.int64, expected floating point")
