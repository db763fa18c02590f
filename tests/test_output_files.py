"""Outputs all or nothing: an existing file survives any failure (a full disk included, told as
"no space left on DEVICE writing FILE"), two jobs on one output cannot both write it, and files
get the user's usual mode."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from engine.files.outputs import OutputBusyError, OutputFiles
from engine.files.paths import SPEECH_SAMPLE

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_an_existing_output_survives_a_failure_and_nothing_is_left(tmp_path):
    target = tmp_path / "reply.wav"
    target.write_text("old")
    with pytest.raises(RuntimeError), OutputFiles(target) as out:
        out.temporary(target).write_text("half")
        raise RuntimeError("the model failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["reply.wav"]  # no temporary, no lock


def test_a_rename_failing_midway_puts_the_set_back(tmp_path):
    """The second output cannot be renamed into place (a folder of files holds its name): the
    first, already replaced, gets its previous file back, and nothing else is left."""
    audio, transcript = tmp_path / "out.wav", tmp_path / "out.json"
    audio.write_text("old audio")
    transcript.mkdir()
    (transcript / "keep").write_text("x")
    with pytest.raises(OSError), OutputFiles(audio, transcript) as out:
        out.temporary(audio).write_text("new audio")
        out.temporary(transcript).write_text("new transcript")
    assert audio.read_text() == "old audio"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.wav"]


def test_outputs_move_into_place_together_with_the_usual_mode(tmp_path, umask_022):
    audio, words = tmp_path / "a.wav", tmp_path / "a.json"
    words.write_text("old")
    with OutputFiles(audio, words) as out:
        first, second = out.temporary(audio), out.temporary(words)
        assert first != second and first.parent == tmp_path and first.name.startswith(".a.wav.")
        save_file({"x": torch.zeros(2)}, str(first))  # safetensors leaves its file 0600
        second.write_text("new")
        assert not audio.exists() and words.read_text() == "old"  # nothing moves before the end
    assert words.read_text() == "new"
    assert oct(audio.stat().st_mode & 0o777) == oct(0o644) and oct(words.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.wav"]


def test_the_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with OutputFiles(tmp_path / "x") as out:
            out.temporary(tmp_path / "x").write_text("x")
    finally:
        os.umask(old)
    assert oct((tmp_path / "x").stat().st_mode & 0o777) == oct(0o640)


def test_quantize_writes_the_usual_mode(tmp_path, umask_022):
    from engine.weights.export import export_q8

    path = export_q8("demo", tmp_path / "q8")
    for name in (path.name, "config.json"):
        assert oct((path.parent / name).stat().st_mode & 0o777) == oct(0o644), name
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_a_training_checkpoint_gets_the_usual_mode(tmp_path, umask_022):
    from engine.families.moshi.diffuplex.predictor import load_predictor, new_predictor
    from engine.loading.models import load_model
    from engine.training.diffuplex import TrainSettings, _checkpoint

    model = load_model("demo")
    out = tmp_path / "adapter.safetensors"
    _checkpoint(new_predictor(model.cfg, rank=2, block=2), out, TrainSettings(block=2, rank=2), SPEECH_SAMPLE, 1,
                0.5, 1.0)
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    assert load_predictor(out, model.cfg).spec.training["steps_done"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["adapter.safetensors"]


def _holder(*targets: Path) -> subprocess.Popen:
    """Another job: holds `targets` until its stdin closes, then writes "A" to each."""
    script = textwrap.dedent(f"""
        import sys
        from engine.files.outputs import OutputFiles
        targets = {[str(t) for t in targets]!r}
        with OutputFiles(*targets) as out:
            print("locked", flush=True)
            sys.stdin.read()
            for t in targets:
                out.temporary(t).write_text("A")
    """)
    job = subprocess.Popen([sys.executable, "-c", script], cwd=str(REPO_ROOT), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "locked"
    return job


@pytest.mark.parametrize("command", [
    ["offline", "--model", "no-such-model", "--input", str(SPEECH_SAMPLE)],
    ["codec", "--model", "no-such-model", "--input", str(SPEECH_SAMPLE)],
    ["token2wav", "--model", "no-such-model", "--tokens", "t.txt", "--prompt", "p.safetensors"],
])
def test_a_second_job_on_the_same_output_refuses_at_once_naming_it(tmp_path, command):
    out = tmp_path / "same.wav"
    first = _holder(out)
    try:
        # The model does not exist: refusing for the lock first shows it is taken before loading.
        second = subprocess.run([sys.executable, "-m", "app.cli", *command, "--output", str(out)],
                                capture_output=True, text=True, cwd=str(REPO_ROOT))
    finally:
        first.communicate("")
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"{out}: another job is writing it" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert first.returncode == 0 and out.read_text() == "A"  # the first job's output, whole
    assert [p.name for p in tmp_path.iterdir()] == ["same.wav"]


def test_sets_sharing_one_file_exclude_each_other(tmp_path):
    audio, words = tmp_path / "a.wav", tmp_path / "same.json"
    first = _holder(audio, words)
    try:
        with pytest.raises(OutputBusyError, match=r"same\.json: another job is writing it"), \
                OutputFiles(tmp_path / "b.wav", words):
            pass
    finally:
        first.communicate("")
    assert not (tmp_path / "b.wav").exists() and words.read_text() == "A"


def test_a_killed_job_leaves_its_output_free(tmp_path):
    out = tmp_path / "o.wav"
    first = _holder(out)
    first.kill()
    first.wait()
    with OutputFiles(out) as again:  # the kernel dropped the dead job's lock
        again.temporary(out).write_text("B")
    assert out.read_text() == "B" and [p.name for p in tmp_path.iterdir()] == ["o.wav"]


def _limit_file_size():
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_failed_write_names_the_output_and_keeps_the_old_file(tmp_path):
    out = tmp_path / "e.wav"
    out.write_text("old")
    done = subprocess.run([sys.executable, "-m", "app.cli", "codec", "--model", "demo", "--input",
                           str(SPEECH_SAMPLE), "--output", str(out)], capture_output=True, text=True,
                          cwd=str(REPO_ROOT), preexec_fn=_limit_file_size)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"duplexcadence: error: {out}: File too large"
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["e.wav"]


def _on_a_full_disk(folder: Path, script: str) -> subprocess.CompletedProcess:
    """`script` (sh) run with `folder` a 100 kB tmpfs holding e.wav = "old", mounted in a mount
    namespace of its own (as root, or as a user where user namespaces are allowed)."""
    folder.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        pytest.skip("needs Linux's unshare to mount a small tmpfs")
    probe = subprocess.run([unshare, "-rm", "sh", "-c", f"mount -t tmpfs -o size=100k tmpfs {folder}"],
                           capture_output=True)
    if probe.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode().strip()}")
    return subprocess.run([unshare, "-rm", "sh", "-c", f"mount -t tmpfs -o size=100k tmpfs {folder} && "
                           f"echo old > {folder}/e.wav && {script}; echo rc=$?; ls -A {folder}; cat {folder}/e.wav"],
                          capture_output=True, text=True, errors="replace", cwd=str(REPO_ROOT))


def test_a_full_disk_names_the_device_and_the_file_and_keeps_the_old_one(tmp_path):
    folder = tmp_path / "small"
    done = _on_a_full_disk(folder, f"{sys.executable} -m app.cli codec --model demo --input {SPEECH_SAMPLE} "
                                   f"--output {folder}/e.wav")
    assert done.stderr.strip() == f"duplexcadence: error: no space left on tmpfs (mounted at {folder}) writing " \
                                  f"{folder}/e.wav"
    assert done.stdout.split() == ["rc=2", "e.wav", "old"]  # the old file, alone and whole


def test_a_full_disk_while_quantizing_is_named_too(tmp_path):
    """safetensors raises no OSError: the OS error is read from its message."""
    folder = tmp_path / "small"
    done = _on_a_full_disk(folder, f"{sys.executable} -m app.cli quantize --model demo --device cpu "
                                   f"--output {folder}")
    assert done.stderr.strip() == f"duplexcadence: error: no space left on tmpfs (mounted at {folder}) writing " \
                                  f"{folder}/model.q8.safetensors"
    assert done.stdout.split() == ["rc=2", "e.wav", "old"]
