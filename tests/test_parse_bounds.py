"""Bounds on the files the library parses (issue 46, point 9), from the Hub or the disk: a
config larger than engine.config.checks.MAX_CONFIG_BYTES is refused from the Hub's listing,
before its bytes are fetched; nesting deeper than MAX_DEPTH (16) is refused before any parser
recurses; each in one line naming the file."""
from __future__ import annotations

import json

import pytest

from engine import CheckpointError, HubClient, HubError, list_models, load_model, missing_files
from engine.config.checks import MAX_CONFIG_BYTES, parse_json
from tests.fake_hub import FakeHub
from tests.hostile_files import deep_json
from tests.hub_fixtures import cache_folder, demo_files, duplexcadence, tiny_model

DEEP = '{"dim": 64, "lm_gen_config": ' + deep_json(100_000) + "}"
HUGE = json.dumps({"pad": "x" * (2 * MAX_CONFIG_BYTES)})  # valid JSON, twice the bound


@pytest.fixture()
def hub():
    with FakeHub() as server:
        server.add_repo("someone/deep", tiny_model(**{"config.json": DEEP.encode()}))
        server.add_repo("someone/huge-config", tiny_model(**{"config.json": HUGE.encode()}))
        server.add_repo("someone/huge-mimi-config", tiny_model(**{"mimi_config.json": HUGE.encode()}))
        yield server


def _fetched(hub, name: str) -> list[str]:
    return [path for method, path, _ in hub.requests if "/resolve/" in path and path.endswith("/" + name)]


def test_a_config_nested_100k_deep_on_the_hub_is_one_line(hub, tmp_path):
    done = duplexcadence(hub, tmp_path, "download", "someone/deep", "--device", "cpu")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr == "duplexcadence: error: someone/deep/config.json: nested deeper than 16 levels\n"


def test_a_config_over_the_bound_is_refused_from_the_listing_before_it_is_fetched(hub, tmp_path):
    done = duplexcadence(hub, tmp_path, "download", "someone/huge-config", "--device", "cpu")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == ("duplexcadence: error: someone/huge-config/config.json: 2.1 MB on the Hub, too large "
                           "for a config file (at most 1.0 MB); not downloaded\n")
    assert _fetched(hub, "config.json") == []
    with pytest.raises(HubError, match="someone/huge-mimi-config/mimi_config.json: 2.1 MB on the Hub, too large"):
        HubClient(endpoint=hub.endpoint, cache_dir=tmp_path / "hub").remote("someone/huge-mimi-config")
    assert _fetched(hub, "mimi_config.json") == []


def test_a_deep_config_on_disk_is_named_by_the_list_and_the_loader(hub, tmp_path, monkeypatch):
    """A cached model whose config.json became 100,000 levels deep (edited, or corrupted)."""
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    hub.add_repo("someone/model", demo_files())
    client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
    folder = client.download(client.remote("someone/model"))
    (folder / "config.json").resolve().write_text(DEEP)
    assert missing_files(folder) == [f"usable config.json ({folder / 'config.json'}: nested deeper than 16 levels)"]
    assert next(e for e in list_models(cache) if e.name == "someone/model").state == "partly downloaded"
    with pytest.raises(CheckpointError, match=r"^someone/model: .*/config.json: nested deeper than 16 levels$"):
        load_model("someone/model")
    listed = duplexcadence(hub, tmp_path, "models", "--device", "cpu")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
    assert cache_folder(cache, "someone/model").is_dir()


def test_an_lm_header_nested_deep_is_no_traceback_in_the_list(tmp_path):
    from engine.weights.int4_copies import read_header
    header = ('{"__metadata__": {"x": ' + deep_json(100_000) + "}}").encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ValueError, match="nested deeper than 16 levels"):
        read_header(path)


@pytest.mark.parametrize(("text", "deep"), [
    (deep_json(16), False), (deep_json(17), True), (deep_json(100_000), True),
    ('{"a": "' + "[" * 40 + '"}', False),  # brackets in a string are text
    ('["\\"' + "[" * 40 + '"]', False),  # an escaped quote does not end the string
    ('["\\\\"' + ", [" * 20 + "]" * 21, True),  # an escaped backslash does
    ('{"a":' * 17 + "1" + "}" * 17, True),
])
def test_nesting_is_measured_by_scanning_brackets_outside_strings(text, deep):
    from engine.config.checks import check_json_nesting
    if deep:
        with pytest.raises(CheckpointError, match="^t: nested deeper than 16 levels$"):
            check_json_nesting(text, "t")
    else:
        check_json_nesting(text, "t")
        parse_json(text, "t")
