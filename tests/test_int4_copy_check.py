"""A kept int4 copy's tensors are compared, byte for byte, with checksums written with them
(engine.weights.checksums) as the copy is read: a changed byte in any tensor, zeroed weights
or missing checksums make the copy damaged; it is made again and the load's notice, shown by
the window, says so. A copy from before the checksums is made again quietly."""
from __future__ import annotations

import logging
import os
import random
import re
import threading

import pytest
import torch

from engine import load_model
from engine.families.moshi.model import read_lm_checkpoint
from engine.files.paths import DEMO_MODEL_DIR, LM_NAME
from engine.weights.int4_copies import kept_copies, read_header
from tests.app_helpers import isolated_settings, load_selected
from tests.test_int4_cache import ONCE, assert_same, load_reporting, on_load, only_copy, rewrite

LM = DEMO_MODEL_DIR / LM_NAME
CPU = torch.device("cpu")
W = 16
"""engine.weights.checksums.WIDTH (the names new with the checks are imported where used, so
that the tests of behaviour run, and fail, on a version without them)."""


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def reference(data: bytes) -> str:
    """S1 and S2 as the module's docstring defines them, in Python integers."""
    data += bytes(-len(data) % 8)
    words = [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]
    s1 = sum(words) % 2**64
    s2 = sum((i + 1) * w for i, w in enumerate(words)) % 2**64
    return f"{s1:016x}{s2:016x}"


def as_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


# Sizes around the 8-byte words, rows of W words and the row sums' own rows (recursion).
SIZES = [1, 7, 8, 9, 8 * W - 1, 8 * W, 8 * W * W + 8, 8 * W * (W + 3) + 5]


@pytest.mark.parametrize("size", SIZES)
def test_the_sums_are_as_defined_and_any_changed_byte_changes_them(size):
    from engine.weights.checksums import WIDTH, checksum
    assert WIDTH == W
    data = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(size))
    expected = checksum(data)
    assert expected == reference(as_bytes(data))
    for position in range(size):  # every byte, each changed three ways
        for change in (0x01, 0x80, 0xFF):
            changed = data.clone()
            changed[position] ^= change
            assert checksum(changed) != expected, (position, change)


def test_other_dtypes_threads_and_offsets_give_the_same_sums():
    from engine.weights.checksums import checksum
    g = torch.Generator().manual_seed(1)
    for tensor in (torch.randn(37, 5, generator=g).to(torch.bfloat16), torch.randn(11, generator=g),
                   torch.randint(-128, 128, (9, 3), dtype=torch.int8, generator=g)):
        assert checksum(tensor) == reference(as_bytes(tensor))
    data = torch.randint(0, 256, (40_003,), dtype=torch.uint8, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = checksum(data[3:])  # not on an 8-byte boundary
    finally:
        torch.set_num_threads(threads)
    assert alone == checksum(data[3:].clone()) == reference(as_bytes(data[3:]))


def test_swapped_or_zeroed_words_change_them():
    from engine.weights.checksums import checksum
    data = torch.randint(0, 256, (8 * 4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    expected = checksum(data)
    for i, j in [(0, 1), (5, 5 + W), (7, 7 + W * W), (100, 4095), (0, 4095)]:
        words = data.clone().view(torch.int64)
        words[[i, j]] = words[[j, i]]
        assert checksum(words) != expected, (i, j)
    for start, stop in [(0, 8), (4096, 8192), (0, 8 * 4096)]:  # a word, a 4 kB page, everything
        zeroed = data.clone()
        zeroed[start:stop] = 0
        assert checksum(zeroed) != expected, (start, stop)


def keep_demo_copy():
    load_model("demo", weights="int4")
    return only_copy().path


def flip(path, position: int, change: int) -> int:
    """XORs the byte at `position` with `change`, in place; returns the byte it held."""
    with open(path, "r+b") as f:
        old = os.pread(f.fileno(), 1, position)[0]
        os.pwrite(f.fileno(), bytes([old ^ change]), position)
    return old


def put_back(path, position: int, byte: int) -> None:
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), bytes([byte]), position)


def tensor_spans(path) -> dict[str, tuple[int, int]]:
    """Each tensor's bytes in the file: [start, end)."""
    header = read_header(path)
    with open(path, "rb") as f:
        data_start = 8 + int.from_bytes(f.read(8), "little")
    return {k: (data_start + v["data_offsets"][0], data_start + v["data_offsets"][1])
            for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize("where", ["summed where they landed", "summed beside the load"])
def test_a_changed_byte_in_any_tensor_is_found_when_the_copy_is_read(where, monkeypatch):
    """One byte of each tensor in turn, through the read of the copy load_kept_int4 makes: a
    small copy's parameters (a GPU's, any copy's) are summed where they landed once loaded;
    a large copy on the CPU is summed from the file by a thread during the load (that branch
    here for the demo's copy, on the tensors of one of each kind)."""
    from engine.weights.checksums import mismatch, recorded
    from engine.weights.int4_kept import DamagedCopy, read_kept
    path = keep_demo_copy()
    spans = tensor_spans(path)
    assert set(spans) == set(recorded(read_header(path)["__metadata__"]))
    names = sorted(spans)
    if where == "summed beside the load":
        monkeypatch.setattr("engine.weights.int4_kept.SUMMED_BESIDE_FROM", {"cpu": 0})
        kinds = {read_header(path)[k]["dtype"] + k.endswith("alpha") * " norm": k for k in names}
        names = sorted(kinds.values())
        assert len(names) == 5  # packed weights, their scales, tables, the tables' scales, norms
    threads = []  # which thread compared: the real comparison, watched

    def watched(*args):
        threads.append(threading.current_thread().name)
        return mismatch(*args)
    monkeypatch.setattr("engine.weights.int4_kept.mismatch", watched)
    cfg = read_lm_checkpoint("demo", layout_only=True).cfg
    rng = random.Random(46)
    for name in names:
        start, end = spans[name]
        position = rng.choice([start, end - 1, rng.randrange(start, end)])
        old = flip(path, position, rng.randrange(1, 256))
        message = rf"^{re.escape(str(path))}: key {re.escape(name)} does not match the checksum written with it$"
        with pytest.raises(DamagedCopy, match=message):
            read_kept(path, cfg, CPU, torch.float32)
        put_back(path, position, old)
    assert_same(read_kept(path, cfg, CPU, torch.float32).state_dict(), on_load("demo"))  # restored: read
    beside = where == "summed beside the load"
    assert len(threads) == len(names) + 1 and {t.startswith("int4-copy-check") for t in threads} == {beside}


def zero_tensor(path, name: str) -> None:
    start, end = tensor_spans(path)[name]
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), bytes(end - start), start)


@pytest.mark.parametrize("damage", ["a changed byte", "zeroed packed weights", "no checksums"])
def test_a_damaged_copy_is_made_again_and_the_load_says_so(damage, caplog):
    path = keep_demo_copy()
    key = "transformer.layers.1.gating.linear_in.weight"
    if damage == "a changed byte":
        start, end = tensor_spans(path)[key]
        flip(path, (start + end) // 2, 0x10)
        why = f"key {key} does not match the checksum written with it"
    elif damage == "zeroed packed weights":
        zero_tensor(path, key)
        why = f"key {key} does not match the checksum written with it"
    else:
        meta = read_header(path)["__metadata__"]
        rewrite(path, lambda t: None, {k: v for k, v in meta.items() if k != "checksums"})  # METADATA_KEY
        why = "it records no checksums"
    caplog.set_level(logging.INFO, "engine")
    model, quantizing = load_reporting("demo")
    assert quantizing and quantizing[0][0] == f"{LM_NAME} {ONCE}"
    assert model.notice == f"{LM}: its int4 copy {path} was damaged ({why}); quantized again and kept"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"{path}: {why}; discarded, it is made again"]
    expected = on_load("demo")
    assert_same(model.lm.state_dict(), expected)
    again = load_model("demo", weights="int4")  # the new copy is sound: read, nothing to say
    assert again.notice == "" and only_copy().path == path
    assert_same(again.lm.state_dict(), expected)


def test_a_copy_from_before_the_checksums_is_made_again_quietly(caplog):
    from engine.weights.checksums import METADATA_KEY, recorded
    from engine.weights.int4_copies import COPY_FORMAT
    path = keep_demo_copy()
    meta = read_header(path)["__metadata__"]
    assert meta["copy_format"] == COPY_FORMAT
    old = {k: v for k, v in meta.items() if k not in ("copy_format", METADATA_KEY)}
    rewrite(path, lambda t: None, old)  # what an earlier version wrote
    assert not kept_copies()[0].current
    caplog.set_level(logging.INFO, "engine")
    model, quantizing = load_reporting("demo")
    assert quantizing and model.notice == ""
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("made by an earlier version, without checksums; discarded" in r.getMessage() for r in caplog.records)
    header = read_header(path)
    assert header["__metadata__"]["copy_format"] == COPY_FORMAT and only_copy().current
    assert set(recorded(header["__metadata__"])) == set(header) - {"__metadata__"}
    assert_same(model.lm.state_dict(), on_load("demo"))


def test_the_window_says_the_damaged_copy_was_made_again(qtbot, tmp_path):
    from app.window.main_window import MainWindow

    path = keep_demo_copy()
    key = "depformer_text_emb.weight"
    start, _ = tensor_spans(path)[key]
    flip(path, start, 0x01)
    window = MainWindow(isolated_settings(tmp_path), device="cpu")
    qtbot.addWidget(window)
    window.show()
    picker = window.model_picker
    qtbot.waitUntil(lambda: "demo" in picker.entries, timeout=30_000)
    picker.select("demo")
    picker.weights.setCurrentIndex(picker.weights.findData("int4"))
    load_selected(qtbot, window, picker)
    said = f"its int4 copy {path} was damaged (key {key} does not match the checksum written with it)"
    qtbot.waitUntil(lambda: said in window.message_bar.text(), timeout=30_000)
    assert window.message_bar.text().endswith("quantized again and kept")
    assert window.models.loaded.notice == f"{LM}: {said}; quantized again and kept"
