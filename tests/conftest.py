import os
import tempfile
import threading

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


WORKER_END_S = 120.0  # a hung worker fails its test instead of the whole run


@pytest.fixture(autouse=True)
def _workers_end_with_their_test():
    """A window closed at a test's end may leave a worker running (the library scan and the memory
    check start as it opens); it must not run on into the next test, where its torch work and its
    signals meet objects that test never made (CI once died of a segfault in the test after one)."""
    try:
        from PyQt6.QtWidgets import QApplication
    except ImportError:  # the GPU machine runs tests/gpu without Qt: no window, so no worker either
        yield
        return
    from app.worker_threads import running_workers, wait_for_workers
    before = set(threading.enumerate())
    yield
    # A worker's result is a queued signal whose slot may start another worker (the scan's list
    # starts the memory check): deliver them, and wait again, until none is left.
    while True:
        if QApplication.instance() is not None:
            QApplication.processEvents()
        if not running_workers(before):
            return
        stuck = wait_for_workers(WORKER_END_S, before)
        if stuck:
            pytest.fail(f"worker threads still running {WORKER_END_S:.0f} s after the test: {[t.name for t in stuck]}")
