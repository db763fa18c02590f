"""A job killed while it writes leaves its hidden `.NAME.XXXXXXXX.part` and `.NAME.lock` beside
the output; the next job on that output removes them, and leaves alone what a live job holds."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.files.outputs import OutputBusyError, OutputFiles
from tests.installed_cli import COMMAND, speech_clip

REPO_ROOT = Path(__file__).resolve().parent.parent


def _writer(target: Path) -> subprocess.Popen:
    """A job half way through writing `target`: its temporary file holds some bytes, and it
    sleeps until killed (or its stdin closes)."""
    script = textwrap.dedent(f"""
        import sys
        from engine.files.outputs import OutputFiles
        with OutputFiles({str(target)!r}) as out:
            with open(out.temporary({str(target)!r}), "wb") as part:
                part.write(b"RIFF half a reply")
                part.flush()
                print("writing", flush=True)
                sys.stdin.read()
    """)
    job = subprocess.Popen([sys.executable, "-c", script], cwd=str(REPO_ROOT), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "writing"
    return job


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_killed_jobs_part_and_lock_are_removed_by_the_next_job(tmp_path):
    out = tmp_path / "reply.wav"
    job = _writer(out)
    job.send_signal(signal.SIGKILL)
    job.wait()
    left = _hidden(tmp_path)
    assert len(left) == 2 and ".reply.wav.lock" in left and any(n.endswith(".part") for n in left)
    with OutputFiles(out) as again:
        again.temporary(out).write_text("B")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reply.wav"] and out.read_text() == "B"


def test_a_killed_jobs_leftovers_go_even_when_the_next_job_fails(tmp_path):
    out = tmp_path / "reply.wav"
    job = _writer(out)
    job.kill()
    job.wait()
    with pytest.raises(RuntimeError), OutputFiles(out):
        raise RuntimeError("the next job fails too")
    assert list(tmp_path.iterdir()) == []


def test_a_live_jobs_files_are_left_alone(tmp_path):
    out, other = tmp_path / "reply.wav", tmp_path / "other.wav"
    job = _writer(out)
    try:
        held = _hidden(tmp_path)
        with pytest.raises(OutputBusyError):  # the same output: refused, its files untouched
            OutputFiles(out).__enter__()
        assert _hidden(tmp_path) == held
        with OutputFiles(other) as beside:  # another output in the same folder
            beside.temporary(other).write_text("C")
        assert _hidden(tmp_path) == held
    finally:
        job.communicate("")
    assert job.returncode == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["other.wav", "reply.wav"]


def test_only_this_outputs_leftovers_go(tmp_path):
    """Names that only look alike (another output's, or the user's own dot files) stay."""
    out = tmp_path / "reply.wav"
    job = _writer(out)
    job.kill()
    job.wait()
    kept = [".reply.wav.x.part", ".reply.wav.backup", ".reply.wav.1234abcd.part.mine",
            ".other.wav.1234abcd.part", ".reply.wav2.1234abcd.part"]
    for name in kept:
        (tmp_path / name).write_text("mine")
    with OutputFiles(out) as again:
        again.temporary(out).write_text("B")
    assert _hidden(tmp_path) == sorted(kept)


def test_the_command_killed_mid_write_is_cleaned_up_by_the_next_run(tmp_path):
    source, out = speech_clip(tmp_path / "in.wav", seconds=6.0), tmp_path / "reply.wav"
    args = [str(COMMAND), "offline", "--model", "demo", "--device", "cpu", "--input", str(source), "--output", str(out)]
    job = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any(n.endswith(".part") for n in _hidden(tmp_path)):  # the reply is being written
            assert job.poll() is None and time.monotonic() < deadline, "no part file appeared"
            time.sleep(0.02)
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
    assert len(_hidden(tmp_path)) == 2 and not out.exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "reply.wav"]
