import os

import pytest
import torch

# Qt widgets are exercised for real, without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Two cores in CI: more torch threads than cores only adds contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
