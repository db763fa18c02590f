"""GPU checks: every module here is marked `gpu` (tests/conftest.py skips those without CUDA).

Numbers the tests measure go to `record`; with GPU_CHECK_OUT set (packaging/gpu_check.sh
sets it) they are merged into $GPU_CHECK_OUT/gpu_numbers.json at the end of each session.
"""
import json
import os

import pytest

_NUMBERS: dict = {}


@pytest.fixture
def record(request):
    def put(key, value):
        _NUMBERS.setdefault(request.node.name, {})[key] = value
    return put


def pytest_sessionfinish(session):
    out = os.environ.get("GPU_CHECK_OUT")
    if not (out and _NUMBERS):
        return
    path = os.path.join(out, "gpu_numbers.json")
    numbers = {}
    if os.path.exists(path):  # gpu_check.sh runs one pytest process per module
        with open(path) as f:
            numbers = json.load(f)
    numbers.update(_NUMBERS)
    with open(path, "w") as f:
        json.dump(numbers, f, indent=1, sort_keys=True)
