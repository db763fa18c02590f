import os
import tempfile

import pytest
import torch

# Qt widgets are exercised for real, without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The Hugging Face client never reaches the real Hub or the user's cache and token from a test:
# tests that download point it at a server of ours on 127.0.0.1 (tests/fake_hub.py).
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the discard port: refused at once
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="duplexcadence-tests-hf-")
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="duplexcadence-tests-cache-")  # kept int4 copies
os.environ.pop("HF_TOKEN", None)
# Two cores in CI: more torch threads than cores only adds contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
