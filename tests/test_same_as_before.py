"""What a user has does not change as the code is reorganised: the demo model's tokens and PCM
(AR, DiffuPlex LISTEN and SPEAK, int8, int4) and a token2wav stream's PCM equal, bit for bit,
what the recorded commit made on the CPU; the settings (presets included), a recording and an
int4 kept copy written by that commit are read unchanged (the copy is read, not made again).
The fixtures and the commit they came from: tests/golden/demo_before_families, made by
packaging/make_demo_golden.py on one thread.

Floats are bit-exact only on one kind of CPU: torch's kernels round differently per instruction
set (the stored PCM differs by up to 3.4e-7 on another Xeon, and a sampled int4 token flips).
Where this machine's output is not the stored one, the recorded commit's own script is run here,
from git, and the output must equal that instead."""
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from engine import RuntimeOptions, load_model
from engine.files.paths import DEMO_MODEL_DIR
from engine.weights.int4_copies import SourceFile, copy_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
import make_demo_golden as recorder  # noqa: E402  (the recording script's own steps)

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "demo_before_families"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())


@pytest.fixture(scope="module")
def golden():
    return _read_outputs(GOLDEN / "outputs.safetensors")


def _read_outputs(path: Path):
    with safe_open(str(path), "np") as f:
        return f.metadata(), {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not iterable)


@functools.cache
def _made_here(commit: str) -> dict:
    """What `commit`'s recording script makes on this machine: its tree from git, run on one
    thread as the stored outputs were."""
    scratch = Path(tempfile.mkdtemp(prefix="duplexcadence-golden-"))
    tree, git = scratch / "tree", ["git", "-C", str(ROOT)]
    added = subprocess.run([*git, "worktree", "add", "--detach", str(tree), commit], capture_output=True, text=True)
    if added.returncode:
        pytest.fail(f"this CPU's output is not the stored one, and {commit[:7]} is not in this clone to make it "
                    f"here: {added.stderr.strip()}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "QT_QPA_PLATFORM": "offscreen"}
    try:
        subprocess.run([sys.executable, "packaging/make_demo_golden.py", str(scratch / "golden")], cwd=tree, env=env,
                       check=True, capture_output=True, timeout=900)
        return _read_outputs(scratch / "golden" / "outputs.safetensors")[1]
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


def _equal(made, kept):
    return made.shape == kept.shape and np.array_equal(made, kept)


@pytest.fixture(scope="module")
def demo():
    return load_model("demo")


def _assert_same(golden, case, **made):
    """`made` (name: array) equals the stored outputs, or else what the recorded commit makes here."""
    meta, trace = golden
    if all(_equal(array, trace[f"{case}.{name}"]) for name, array in made.items()):
        return
    here = _made_here(meta["commit"])
    for name, array in made.items():
        np.testing.assert_array_equal(array, here[f"{case}.{name}"],
                                      err_msg=f"{case}: {name} differs from what {meta['commit'][:7]} makes here")


@pytest.mark.parametrize("case", ["ar", "listen", "speak"])
def test_the_demo_model_says_what_it_said(golden, demo, case):
    meta, trace = golden
    options = RuntimeOptions(seed=int(meta["seed"]))
    if case != "ar":
        options = options.replace(policy=case, block=int(meta["block"]), tau=float(meta["tau"]))
    predictor = demo.predictor_file if case != "ar" else None
    assert predictor is None or predictor.name == meta["predictor"]
    tokens, pcm = recorder.conversation(demo, options, trace["user_pcm"], predictor)
    _assert_same(golden, case, tokens=tokens, pcm=pcm)
    assert len({tuple(t[1:9]) for t in tokens}) > len(tokens) // 2  # the codes vary: a real test


def test_int8_says_what_it_said(golden):
    meta, trace = golden
    model = load_model("demo", weights="int8")
    options = RuntimeOptions(seed=int(meta["seed"]), weights="int8")
    tokens, pcm = recorder.conversation(model, options, trace["user_pcm"])
    _assert_same(golden, "int8", tokens=tokens, pcm=pcm)


@pytest.fixture
def int4_source(monkeypatch, tmp_path):
    """The demo model where the recording commit's copy says its source was, with the same
    size and modification time; an empty cache holding only that commit's int4 copy."""
    folder = Path(EXPECTED["int4_source"]).parent
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(DEMO_MODEL_DIR, folder)
    lm = folder / "model.safetensors"
    os.utime(lm, ns=(EXPECTED["int4_source_mtime_ns"], EXPECTED["int4_source_mtime_ns"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    copy = copy_path(SourceFile.of(lm), "cpu")
    copy.parent.mkdir(parents=True)
    shutil.copyfile(GOLDEN / "demo_int4_copy.safetensors", copy)
    yield folder, copy
    shutil.rmtree(folder, ignore_errors=True)


def test_int4_reads_the_kept_copy_and_says_what_it_said(golden, int4_source, caplog):
    meta, trace = golden
    folder, copy = int4_source
    before = copy.read_bytes()
    with caplog.at_level(logging.INFO, logger="engine"):
        model = load_model(folder, weights="int4")
    assert "int4 weights read from the kept copy" in caplog.text, caplog.text
    assert copy.read_bytes() == before  # read as it was, not made again
    options = RuntimeOptions(seed=int(meta["seed"]), weights="int4")
    tokens, pcm = recorder.conversation(model, options, trace["user_pcm"])
    _assert_same(golden, "int4", tokens=tokens, pcm=pcm)


def test_token2wav_plays_what_it_played(golden, tmp_path):
    _assert_same(golden, "token2wav", pcm=recorder.token2wav_pcm(tmp_path))


def test_settings_and_presets_read_as_they_were(tmp_path):
    from PyQt6.QtCore import QSettings

    from app.app_settings import AppSettings
    shutil.copyfile(GOLDEN / "settings.ini", tmp_path / "settings.ini")
    read = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    assert read.repair() is None  # nothing reset
    for key in ("model_source", "model_weights", "speaker_volume", "speaker_muted", "theme", "record",
                "engine_pane_open", "sampling"):
        assert getattr(read, key) == EXPECTED[key], key
    for kind, pair in EXPECTED["devices"].items():
        assert [read.device_key(kind), read.device_label(kind)] == pair
    assert [list(p) for p in read.persona_presets] == EXPECTED["presets"]
    assert str(read.recordings_dir) == EXPECTED["recordings_dir"]


def test_a_recording_reads_as_it_did():
    from app.conversation.recording_files import list_recordings, read_recording
    expected = EXPECTED["recording"]
    rec = read_recording(GOLDEN / "recordings" / expected["wav"])
    assert not rec.problems
    assert (rec.model, rec.seconds, rec.words) == (expected["model"], expected["seconds"], expected["words"])
    assert [r.wav.name for r in list_recordings([GOLDEN / "recordings"])] == [expected["wav"]]
