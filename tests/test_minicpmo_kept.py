"""MiniCPM-o's int8 and int4 weights quantized once and kept (engine/families/minicpmo/kept_weights.py),
on the tiny checkpoint on the CPU: the first load writes the copy, the next reads it and gets the
same tensors bit for bit; a damaged copy, a changed shard and a disk too full are each handled."""
from __future__ import annotations

import logging
import os
import shutil

import pytest
import torch

from engine.families.minicpmo.kept_weights import _flat
from engine.families.minicpmo.model import load
from engine.weights import kept_files
from engine.weights.int4_copies import copies_under, kept_copies
from tests import minicpmo_forced as forcing


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The tiny checkpoint in a folder of its own, and a copies folder of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "minicpmo_tiny"
    shutil.copytree(forcing.FOLDER, target)
    return target


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        left, right = _flat({key: a[key]}) or {key: a[key]}, _flat({key: b[key]}) or {key: b[key]}
        assert left.keys() == right.keys()
        assert all(torch.equal(left[k], right[k]) and left[k].dtype == right[k].dtype for k in left), key


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_once_then_read_from_the_copy(folder, weights, caplog):
    first = load(folder, None, torch.device("cpu"), torch.bfloat16, weights=weights)
    copies = copies_under(folder)
    assert [(c.weights, c.device_type, c.current) for c in copies] == [(weights, "cpu", True)]
    assert copies[0].path.name.endswith(f".{weights}.safetensors")
    assert "copy" not in first.notice
    with caplog.at_level(logging.INFO):
        second = load(folder, None, torch.device("cpu"), torch.bfloat16, weights=weights)
    assert "read from the kept copy" in caplog.text
    _same(first.weights_by_name, second.weights_by_name)
    # bf16 neither reads nor makes one; the other format has its own
    load(folder, None, torch.device("cpu"), torch.bfloat16, weights="bf16")
    assert len(copies_under(folder)) == 1


def test_a_damaged_copy_is_made_again(folder):
    first = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int8")
    copy = copies_under(folder)[0].path
    data = bytearray(copy.read_bytes())
    data[-100] ^= 0x40  # a byte of the last tensor
    copy.write_bytes(bytes(data))
    second = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int8")
    assert "int8 copy was damaged" in second.notice and "does not match the checksum" in second.notice
    assert "quantized again and kept" in second.notice
    _same(first.weights_by_name, second.weights_by_name)
    third = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int8")
    assert "copy" not in third.notice


def test_a_changed_shard_makes_the_copy_stale(folder, caplog):
    load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int8")
    shard = folder / "model-00003-of-00003.safetensors"
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with caplog.at_level(logging.INFO):
        again = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int8")
    assert "made from other files" in caplog.text and "quantized to int8 once" in caplog.text
    assert "copy" not in again.notice
    assert [c.current for c in kept_copies()] == [True]


def test_no_room_quantizes_in_memory_and_says_so(folder, monkeypatch):
    reference = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int4")
    for copy in copies_under(folder):
        copy.path.unlink()
    monkeypatch.setattr(kept_files, "RESERVE_BYTES", 1 << 60)
    model = load(folder, None, torch.device("cpu"), torch.bfloat16, weights="int4")
    assert "Int4 weights not kept: it needs" in model.notice and "quantized in memory for this load" in model.notice
    assert copies_under(folder) == []
    _same(reference.weights_by_name, model.weights_by_name)
