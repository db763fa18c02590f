"""The process ends cleanly when the window closes while a worker thread is still inside torch
(a model loading, a memory check): the interpreter's own exit would tear torch down under it and
abort (SIGABRT), which the desktop reports as a crash."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# A memory check that never ends, as one caught mid-way by the window's closing; then the exit
# as run_app ends.
SCRIPT = """
import threading, time
import app.worker_threads as workers
from engine import plan_memory

def check_forever():
    while True:
        plan_memory("demo", None, "cpu")

if {worker}:
    threading.Thread(target=check_forever, name="memory-check", daemon=True).start()
    time.sleep(1.0)
workers.EXIT_WAIT_S = 0.5
workers.exit_past_workers(3)
print("returned", flush=True)
"""


def _exit(worker: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(worker=worker)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_a_worker_inside_torch_does_not_abort_the_exit():
    done = _exit(worker=True)
    assert done.returncode == 3 and "returned" not in done.stdout, done.stderr
    assert "terminate called" not in done.stderr


def test_with_no_worker_left_the_exit_is_the_usual_one():
    done = _exit(worker=False)
    assert done.returncode == 0 and "returned" in done.stdout, done.stderr


def test_every_thread_the_app_starts_is_a_known_worker_or_watch():
    """The workers are known by the names their classes give them: a thread named anew in app/
    must be listed (or be one of the long-lived watches, which end with their owners)."""
    import re

    from app.worker_threads import WORKER_NAMES

    watches = {"sound-server-watch", "recording fsync"}
    named = set()
    for path in (REPO / "app").rglob("*.py"):
        named |= set(re.findall(r'(?:name=|super\(\).__init__\()"([a-z][a-z -]*)"', path.read_text()))
    assert named == WORKER_NAMES | watches
