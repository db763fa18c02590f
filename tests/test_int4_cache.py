"""Int4 weights quantized once and kept: the first int4 load of a bf16 or q8 LM file makes its
copy in our per-user cache (XDG_CACHE_HOME, a test folder here), later loads read it, bit for
bit what quantizing on load gives; a changed source, a broken copy, a crashed write's
leftover, a disk without room or a folder that cannot be written; the library's text, its
removal, `duplexcadence models`, and the window."""
from __future__ import annotations

import logging
import os
import shutil
import time
from collections import namedtuple

import pytest
import torch
from PyQt6.QtWidgets import QMessageBox
from safetensors.torch import load_file, save_file

from engine import (
    CheckpointError,
    HubClient,
    list_models,
    load_model,
    plan_download,
    remove_model,
    reporting_progress,
    size_text,
)
from engine.families.moshi.lm.lm_loading import load_lm
from engine.families.moshi.model import read_lm_checkpoint
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from engine.weights.export import export_q8
from engine.weights.int4_copies import LEFTOVER_S, copies_folder, header_metadata, kept_copies
from tests.app_helpers import isolated_settings, keep_torch_threads, load_selected, removal_dialog  # noqa: F401  (fixture)
from tests.hub_fixtures import BF16, Q8, hub, q8_folder  # noqa: F401  (fixtures)
from tests.test_cli_models import cli

ONCE = "→ int4 (once, then kept)"


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def demo_folder(tmp_path):
    """The demo model in a folder of the test's, so its LM file can be changed."""
    return shutil.copytree(DEMO_MODEL_DIR, tmp_path / "demo")


def on_load(source) -> dict:
    """The LM's parameters as quantizing on every load gave them (build_lm, nothing kept)."""
    ckpt = read_lm_checkpoint(source)
    return load_lm(ckpt.path, ckpt.cfg, weights="int4").state_dict()


def assert_same(state: dict, expected: dict) -> None:
    assert state.keys() == expected.keys()
    for key, value in state.items():
        assert value.dtype == expected[key].dtype and torch.equal(value, expected[key]), key


def load_reporting(source, **kwargs):
    reports = []
    with reporting_progress(lambda name, done, total: reports.append((name, done, total))):
        model = load_model(source, weights="int4", **kwargs)
    return model, [r for r in reports if ONCE in r[0]]


def rewrite(path, change, metadata=None) -> None:
    """The safetensors file at `path` with `change` made to its tensors, written beside it and
    renamed over it (its tensors are mapped from the file: never written back into it)."""
    tensors = {k: v.clone() for k, v in load_file(str(path)).items()}
    change(tensors)
    save_file(tensors, str(path.with_name("rewritten")), metadata=metadata)
    os.replace(path.with_name("rewritten"), path)


def only_copy():
    copies = kept_copies()
    assert len(copies) == 1, copies
    return copies[0]


def test_the_first_load_keeps_a_copy_the_next_reads_it_bit_for_bit(caplog):
    caplog.set_level(logging.INFO, "engine")
    first, quantizing = load_reporting("demo")
    assert first.weights == "int4" and first.notice == ""
    assert quantizing[0][0] == f"{LM_NAME} {ONCE}" and quantizing[-1][1] == quantizing[-1][2] > 0
    copy = only_copy()
    assert copy.current and copy.source == (DEMO_MODEL_DIR / LM_NAME).resolve()
    assert copy.device_type == "cpu" and copy.path.name.endswith(".cpu.int4.safetensors")  # what loads on it
    assert copy.path.parent == copies_folder() and copies_folder().is_relative_to(os.environ["XDG_CACHE_HOME"])
    assert header_metadata(copy.path)["format"] == "duplexcadence-int4"
    before = copy.path.stat()
    caplog.clear()
    second, quantizing = load_reporting("demo")
    assert quantizing == []  # nothing quantized again: read from the copy, which is untouched
    after = copy.path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert any("read from the kept copy" in r.getMessage() for r in caplog.records)
    expected = on_load("demo")
    assert_same(first.lm.state_dict(), expected)
    assert_same(second.lm.state_dict(), expected)
    assert not list(copies_folder().glob(".*"))  # no temporary left behind


def test_a_q8_source_is_kept_as_quantizing_it_on_load_gives(tmp_path):
    q8 = export_q8("demo", tmp_path / "q8").parent
    assert_same(load_model(q8, weights="int4").lm.state_dict(), on_load(q8))
    assert only_copy().source == (q8 / "model.q8.safetensors").resolve()
    assert_same(load_model(q8, weights="int4").lm.state_dict(), on_load(q8))
    entry = next(e for e in list_models(tmp_path / "hub", [str(q8)]) if e.name == str(q8))
    assert entry.lm_weights == "int8" and entry.kept_copies == (only_copy(),)
    assert entry.int4_note.startswith("int4: quantized once from its int8 files and kept: ")


def test_a_changed_source_makes_a_new_copy_and_another_source_its_own(demo_folder, tmp_path):
    load_model(demo_folder, weights="int4")
    old = only_copy()
    old_stat = old.path.stat()
    lm = demo_folder / LM_NAME
    rewrite(lm, lambda t: t.__setitem__("text_linear.weight", t["text_linear.weight"] * 1.5))
    assert not kept_copies()[0].current
    model, quantizing = load_reporting(demo_folder)
    assert quantizing, "the changed source was not quantized again"
    new = only_copy()  # the same entry, made again: one copy per source file
    assert new.path == old.path and new.current and new.path.stat().st_mtime_ns != old_stat.st_mtime_ns
    assert header_metadata(new.path)["source_mtime_ns"] == str(lm.stat().st_mtime_ns)
    assert_same(model.lm.state_dict(), on_load(demo_folder))
    other = shutil.copytree(DEMO_MODEL_DIR, tmp_path / "other")
    load_model(other, weights="int4")
    assert {c.source for c in kept_copies()} == {lm.resolve(), (other / LM_NAME).resolve()}
    shutil.rmtree(other)  # a copy whose source is gone goes when the next copy is made
    load_model("demo", weights="int4")
    assert {c.source for c in kept_copies()} == {lm.resolve(), (DEMO_MODEL_DIR / LM_NAME).resolve()}


def test_a_source_that_cannot_load_is_named_and_not_kept(demo_folder):
    lm = demo_folder / LM_NAME
    rewrite(lm, lambda t: t["depformer.layers.0.norm1.alpha"].view(-1).__setitem__(0, float("nan")))
    with pytest.raises(CheckpointError, match=rf"^{lm}: key depformer\.layers\.0\.norm1\.alpha holds NaN"):
        load_model(demo_folder, weights="int4")
    assert kept_copies() == []


def _keep_demo_copy():
    load_model("demo", weights="int4")
    return only_copy().path


@pytest.mark.parametrize("damage", ["truncated", "not safetensors", "a key missing", "a wrong shape"])
def test_a_broken_copy_is_discarded_and_made_again(damage, caplog):
    path = _keep_demo_copy()
    if damage == "truncated":  # what a crash mid-write would leave without the rename
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "not safetensors":
        path.write_bytes(b"\xff" * 64)
    elif damage == "a key missing":
        rewrite(path, lambda t: t.pop("text_linear.weight_int4_scale"), header_metadata(path))
    else:
        rewrite(path, lambda t: t.__setitem__("text_linear.weight", t["text_linear.weight"][:-1]),
                header_metadata(path))
    caplog.set_level(logging.INFO, "engine")
    model, quantizing = load_reporting("demo")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"{path}: " in warnings[0] and "discarded, it is made again" in warnings[0]
    assert quantizing and model.notice.startswith(f"{DEMO_MODEL_DIR / LM_NAME}: its int4 copy {path} was damaged (")
    assert model.notice.endswith("); quantized again and kept")
    assert_same(model.lm.state_dict(), on_load("demo"))
    assert only_copy().path == path
    assert_same(load_model("demo", weights="int4").lm.state_dict(), on_load("demo"))


def test_a_copy_in_another_versions_layout_is_made_again(caplog):
    path = _keep_demo_copy()
    rewrite(path, lambda t: None, {**header_metadata(path), "group_size": "128"})
    caplog.set_level(logging.INFO, "engine")
    model, quantizing = load_reporting("demo")
    assert quantizing and any("made in another int4 layout; discarded" in r.getMessage() for r in caplog.records)
    assert header_metadata(path)["group_size"] == "64"
    assert_same(model.lm.state_dict(), on_load("demo"))


def test_a_crashed_writes_leftover_is_removed_and_never_read():
    path = _keep_demo_copy()
    path.unlink()
    old, live = (path.with_name(f".{path.name}.{pid}.1.part") for pid in (1, 2))
    for part in (old, live):
        part.write_bytes(b"half a copy")
    os.utime(old, (time.time() - LEFTOVER_S - 60,) * 2)
    model, quantizing = load_reporting("demo")
    assert quantizing and not old.exists() and live.exists()  # a write still going on is left alone
    assert_same(model.lm.state_dict(), on_load("demo"))


def _falls_back(caplog, says: str) -> None:
    caplog.set_level(logging.INFO, "engine")
    model = load_model("demo", weights="int4")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage() and warnings[0].exc_info is None
    assert model.notice == warnings[0].getMessage()
    assert model.notice.startswith(f"{DEMO_MODEL_DIR / LM_NAME}: int4 weights not kept: ")
    assert says in model.notice and model.notice.endswith("quantized in memory for this load")
    assert_same(model.lm.state_dict(), on_load("demo"))


def test_a_folder_that_cannot_be_made_loads_in_memory_with_a_warning(user_cache, caplog):
    user_cache.mkdir()
    (user_cache / "DuplexCadence").write_text("a file where our folder would be")
    _falls_back(caplog, f"cannot make the folder {copies_folder()}")


def test_a_disk_without_room_loads_in_memory_with_a_warning(monkeypatch, caplog):
    # A full disk cannot be made here without root (a small tmpfs): the free space is reported
    # as a few kB instead.
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12, 4096))
    _falls_back(caplog, f"and {copies_folder()} has 4.1 kB free")
    assert not list(copies_folder().iterdir())


def test_a_failed_write_loads_in_memory_with_a_warning_and_leaves_nothing(caplog):
    path = _keep_demo_copy()
    path.unlink()
    path.mkdir()  # the rename into place fails
    (path / "x").write_text("")
    _falls_back(caplog, f"writing {path} failed")
    assert sorted(p.name for p in copies_folder().iterdir()) == [path.name]


def test_the_library_says_what_int4_downloads_keeps_and_removes(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
    plan = plan_download(client, BF16, "int4", "cpu")
    assert plan.note == (f"int4: downloads {Q8}, the official int8 files; they are quantized to int4 once, on the "
                         f"first int4 load, and the int4 copy kept in {copies_folder()}")
    client.download(plan_download(client, BF16, "bf16", "cpu").remote)
    entry = next(e for e in list_models(cache) if e.name == BF16)
    assert entry.kept_copies == () and entry.lm_weights == "bf16"
    assert entry.int4_note == (f"int4: from its bf16 files, quantized once on the first int4 load and kept in "
                               f"{copies_folder()}")
    load_model(BF16, weights="int4")
    load_model("demo", weights="int4")  # another model's copy, which stays
    entry = next(e for e in list_models(cache) if e.name == BF16)
    (copy,) = entry.kept_copies
    assert copy.source.is_relative_to(cache) and copy.path.is_file()
    kept = f"kept: {size_text(copy.size_on_disk)} at {copy.path}"
    assert entry.int4_note == f"int4: quantized once from its bf16 files and {kept}"
    freed = remove_model(BF16, cache)
    assert not copy.path.exists() and freed >= entry.size_on_disk + copy.size_on_disk
    assert [c.source for c in kept_copies()] == [(DEMO_MODEL_DIR / LM_NAME).resolve()]


def test_models_shows_the_kept_copy(hub, tmp_path):
    load_model("demo", weights="int4")
    copy = only_copy()
    result = cli(hub, tmp_path, "models", "--device", "cpu")  # the environment's XDG_CACHE_HOME: ours
    assert result.returncode == 0, result.stderr
    demo = result.stdout[result.stdout.index("\ndemo  [ready]"):].split("\n\n")[0]
    assert f"int4: quantized once from its bf16 files and kept: {size_text(copy.size_on_disk)} at {copy.path}" in demo
    section = result.stdout[result.stdout.index(f"\n{BF16}  [not downloaded]"):]
    assert "on the first int4 load, and the int4 copy kept in" in section and "Traceback" not in result.stderr


def test_the_window_says_where_the_copy_is_and_removes_it(qtbot, tmp_path, monkeypatch, hub):
    from huggingface_hub import constants

    from app.window.main_window import MainWindow
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    client = HubClient(endpoint=hub.endpoint, cache_dir=cache)
    client.download(plan_download(client, BF16, "bf16", "cpu").remote)
    window = MainWindow(isolated_settings(tmp_path), device="cpu", hub_client=client)
    qtbot.addWidget(window)
    window.show()
    picker = window.model_picker
    qtbot.waitUntil(lambda: BF16 in picker.entries, timeout=30_000)
    picker.select(BF16)
    picker.weights.setCurrentIndex(picker.weights.findData("int4"))
    assert "quantized once on the first int4 load and kept in" in picker.about.text()
    with qtbot.waitSignal(window.models.ready, timeout=120_000):
        picker.action_button.click()
    copy = only_copy()
    kept = f"kept: {size_text(copy.size_on_disk)} at {copy.path}"
    qtbot.waitUntil(lambda: kept in picker.about.text(), timeout=30_000)
    picker.select("demo")
    load_selected(qtbot, window, picker)
    dialog = removal_dialog(window, picker, BF16)
    kept = f"and the quantized copies kept of them ({size_text(copy.size_on_disk)}, in {copy.path.parent})"
    assert kept in dialog.text()
    dialog.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: f"Removed {BF16}" in window.message_bar.text(), timeout=30_000)
    assert not copy.path.exists()
