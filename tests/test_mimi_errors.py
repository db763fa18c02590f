"""Bad Mimi checkpoints and configs: one exception type, naming the file and what is wrong."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.errors import CheckpointError
from engine.families.moshi.mimi import load_mimi
from engine.families.moshi.mimi.mimi_loading import CHECKPOINT_NAME, CONFIG_NAME
from tests.mimi_reference import build_reference, save_official, small_config

SOME_KEY = "decoder.model.2.convtr.convtr.weight"


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    cfg = small_config()
    return save_official(build_reference(cfg), cfg, tmp_path_factory.mktemp("good"))


@pytest.fixture
def work(good_dir, tmp_path):
    """A private copy of the good checkpoint directory, free to damage."""
    return shutil.copytree(good_dir, tmp_path / "ckpt")


def _edit_tensors(directory, edit):
    path = directory / CHECKPOINT_NAME
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))
    return path


def _edit_config(directory, edit):
    path = directory / CONFIG_NAME
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))
    return path


def _fails(path_arg, *words, **kwargs):
    with pytest.raises(CheckpointError) as info:
        load_mimi(path_arg, **kwargs)
    message = str(info.value)
    for word in words:
        assert str(word) in message, message
    return message


def test_good_checkpoint_loads_from_dir_or_file(work):
    assert load_mimi(work).num_codebooks == 8
    assert load_mimi(work / CHECKPOINT_NAME).cardinality == 64


def test_missing_file(tmp_path, work):
    _fails(tmp_path, tmp_path / CHECKPOINT_NAME, "not found")
    _fails(work / "nope.safetensors", "nope.safetensors", "not found")


def test_not_safetensors(work):
    path = work / CHECKPOINT_NAME
    path.write_text("this is a text file, not a checkpoint\n" * 10)
    _fails(work, path, "safetensors")


def test_truncated(work):
    path = work / CHECKPOINT_NAME
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _fails(work, path)


def test_corrupt_header(work):
    path = work / CHECKPOINT_NAME
    data = bytearray(path.read_bytes())
    data[8:40] = b"\xff" * 32  # the JSON header starts after an 8-byte length
    path.write_bytes(bytes(data))
    _fails(work, path, "safetensors")


def test_missing_key(work):
    path = _edit_tensors(work, lambda t: t.pop(SOME_KEY))
    _fails(work, path, "missing", SOME_KEY)


def test_unexpected_key(work):
    extra = "encoder.model.99.conv.conv.weight"
    path = _edit_tensors(work, lambda t: t.__setitem__(extra, torch.zeros(3)))
    _fails(work, path, "unexpected", extra)


def test_wrong_shape(work):
    path = _edit_tensors(work, lambda t: t.__setitem__(SOME_KEY, t[SOME_KEY][:, :, :-1].contiguous()))
    _fails(work, path, SOME_KEY, "shape")


def test_non_finite_weights(work):
    def poison(t):
        t[SOME_KEY] = t[SOME_KEY].clone()
        t[SOME_KEY].view(-1)[0] = float("nan")
    path = _edit_tensors(work, poison)
    _fails(work, path, SOME_KEY, "NaN")


def test_official_config_against_small_weights(work):
    """Without its mimi_config.json the small checkpoint is read as the official Mimi."""
    (work / CONFIG_NAME).unlink()
    _fails(work, work / CHECKPOINT_NAME, "missing key", "official", CONFIG_NAME)


def test_num_codebooks_out_of_range(work):
    _fails(work, "num_codebooks 11", num_codebooks=11)
    _fails(work, "num_codebooks 0", num_codebooks=0)


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(extra=1), ["unknown key extra"]),
    (lambda c: c["seanet"].update(filters=3), ["unknown key seanet.filters"]),
    (lambda c: c["seanet"].update(ratios=[8, "6"]), ["seanet.ratios", "list of integers"]),
    (lambda c: c["seanet"].update(n_filters=4.0), ["seanet.n_filters", "integer"]),
    (lambda c: c["transformer"].update(causal="yes"), ["transformer.causal", "true or false"]),
    (lambda c: c.update(quantizer=[1]), ["quantizer", "object"]),
    (lambda c: c["quantizer"].update(bins=-4), ["quantizer.bins", "positive"]),
    (lambda c: c["quantizer"].update(n_q=1), ["quantizer.n_q", "n_q_semantic"]),
    (lambda c: c["quantizer"].update(input_dimension=33), ["quantizer.input_dimension"]),
    (lambda c: c["transformer"].update(num_heads=5), ["transformer.num_heads"]),
    (lambda c: c["transformer"].update(output_dimensions=[32, 32]), ["transformer.output_dimensions"]),
    (lambda c: c["transformer"].update(norm="rms_norm"), ["transformer.norm"]),
    (lambda c: c.update(frame_rate=25.5), ["frame_rate"]),
    (lambda c: c["seanet"].update(ratios=[8, 6, 5, 3]), ["frame_rate", "hop"]),
    (lambda c: c["seanet"].update(norm="weight_norm"), ["seanet.norm"]),
    (lambda c: c["seanet"].update(activation="GELU"), ["seanet.activation"]),
    (lambda c: c.update(channels=2), ["channels"]),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_bad_config(work, edit, words):
    path = _edit_config(work, edit)
    _fails(work, path, *words)


def test_config_not_json(work):
    path = work / CONFIG_NAME
    path.write_text("{ not json")
    _fails(work, path, "JSON")
    path.write_text("[1, 2]")
    _fails(work, path, "object")
