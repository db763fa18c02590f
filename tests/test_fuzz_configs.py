"""Fuzzing the files a model folder is read from (issue 25): the demo model's config.json and
mimi_config.json, a token2wav flow.yaml and the demo predictor's metadata, with values replaced
by huge, negative, non-finite, wrongly typed or deeply nested ones and keys dropped. Every load
ends in success or in the engine's CheckpointError, one line naming the file; never another
exception. A sample runs in a child process under an address-space limit, so a size that
slipped past the bounds would fail there instead of allocating."""
import json
import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile_files import TARGETS, Deep, Loads, paths, yaml_lines_mutated
from tests.hostile_files import mutated as json_mutated

HOSTILE = st.one_of(
    st.sampled_from([10**9, 10**18, 2**63, -1, -(10**9), 0, 1, math.nan, math.inf, -math.inf, 1e308, 0.5,
                     "1", "", "../../x", True, False, None, [], {}, [1, 2], {"a": 1}]),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.integers(min_value=17, max_value=100_000).map(Deep),
)
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ADDRESS_LIMIT = 3 << 30
"""The child's address space: the demo model loads within about 1.1 GiB of it (measured:
VmPeak 1.09 GiB with torch imported, the demo model, its Mimi and a small token2wav loaded)."""


@pytest.fixture(scope="module")
def loads(tmp_path_factory):
    return Loads(tmp_path_factory.mktemp("fuzz"))


def _edits(draw, target: str, original) -> list[tuple]:
    if target == "flow.yaml":
        where = st.integers(min_value=0, max_value=len(original.splitlines()) - 1)
    else:
        where = st.sampled_from([(), *paths(original)])
    edit = st.one_of(st.tuples(st.just("set"), where, HOSTILE), st.tuples(st.just("drop"), where))
    return draw(st.lists(edit, min_size=1, max_size=3))


def _text(target: str, original, edits) -> str:
    return yaml_lines_mutated(original, edits) if target == "flow.yaml" else json_mutated(original, edits)


def _check(loads: Loads, target: str, text: str) -> None:
    exc = loads.load(target, text)
    if exc is not None:
        message = str(exc)
        assert "\n" not in message, message
        assert str(loads.file(target).parent) in message, message


@pytest.mark.parametrize("target", TARGETS)
@SETTINGS
@given(data=st.data())
def test_a_mutated_file_loads_or_is_refused_in_one_line(loads, target, data):
    original = loads.originals[target]
    edits = data.draw(st.composite(lambda draw: _edits(draw, target, original))(), label="edits")
    _check(loads, target, _text(target, original, edits))


def _sample(loads: Loads) -> list[tuple[str, str]]:
    """Each number of each file set huge, then negative: the values that size allocations."""
    cases = []
    for target in TARGETS:
        original = loads.originals[target]
        if target == "flow.yaml":
            places = [i for i, line in enumerate(original.splitlines())
                      if line.split(":", 1)[-1].strip().replace(".", "", 1).isdigit()]
        else:
            places = [p for p in paths(original) if isinstance(_at(original, p), int | float)
                      and not isinstance(_at(original, p), bool)]
        for place in places:
            for value in (10**9, -1):
                cases.append((target, _text(target, original, [("set", place, value)])))
    return cases


def _at(data, path):
    for part in path:
        data = data[part]
    return data


def test_a_sample_loads_under_an_address_space_limit(loads):
    cases = _sample(loads)
    assert len(cases) > 100
    # The unchanged files first: they must load within the limit, or the limit proves nothing.
    cases = [(t, _text(t, loads.originals[t], [])) for t in TARGETS] + cases
    child = subprocess.run([sys.executable, "-m", "tests.hostile_files", str(ADDRESS_LIMIT)],
                           input="".join(json.dumps(c) + "\n" for c in cases), capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    results = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(results) == len(cases), child.stderr[-3000:]
    assert [r[1] for r in results[:len(TARGETS)]] == ["ok"] * len(TARGETS), results[:len(TARGETS)]
    bad = [r for r in results if r[1] == "other"]
    assert not bad, bad[:5]
