"""The app's one-shot worker threads (loading, checks, downloads, a conversation), known by the
names their classes give them, and how the process ends while one still runs."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger("duplexcadence")

WORKER_NAMES = frozenset({
    # app/models/model_loader.py
    "engine-loader", "predictor-loader", "memory-check",
    # app/models/model_library.py
    "library-scan", "download-check", "model-download", "model-removal", "token-check",
    # app/gpu/gpu_support_dialog.py and app/conversation/engine_thread.py
    "gpu-support-download", "engine-conversation",
})
# What a closed window waits for at exit: a memory check or a scan ends well within it; a model
# still loading is abandoned (its weights are only read).
EXIT_WAIT_S = 5.0


def running_workers(besides: set[threading.Thread] | None = None) -> list[threading.Thread]:
    """The workers running now, less those in `besides`."""
    return [t for t in threading.enumerate() if t.name in WORKER_NAMES and t not in (besides or set())]


def wait_for_workers(timeout_s: float, besides: set[threading.Thread] | None = None) -> list[threading.Thread]:
    """Waits up to `timeout_s` in all for the running workers; returns those still running."""
    deadline = time.monotonic() + timeout_s
    left = running_workers(besides)
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in left if t.is_alive()]


def exit_past_workers(status: int) -> None:
    """Ends the process now if a worker still runs after a short wait; returns otherwise. The
    interpreter's normal exit tears down torch and Qt under a thread still in them, which aborts
    the process (SIGABRT, a crash report on the desktop) after everything was saved; this exit
    skips that teardown. Callers have saved what must be saved (recordings close with the
    window, settings are synced here)."""
    left = wait_for_workers(EXIT_WAIT_S)
    if not left:
        return
    log.info("exiting while %s still runs", ", ".join(t.name for t in left))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
