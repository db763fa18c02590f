"""Checksums of tensors' bytes, for the int4 copies we keep (engine.weights.int4_kept): written with a
copy, compared when it is read, on the device its tensors land on.

A tensor's bytes are read as 64-bit little-endian words w_0 … w_{L-1} (the last one padded
with zero bytes) and summed twice modulo 2**64: S1 = Σ w_i and S2 = Σ (i + 1) w_i. Changing
one byte of word i by d (1 <= |d| <= 255) changes that word by d * 256**b (b < 8), which is not
0 modulo 2**64: S1 changes, so any single changed byte is seen. Zeroing words changes S1 unless
they summed to 0, and then S2 as well; swapping two different words leaves S1 and changes S2.
Corruption, not an attacker, is what it guards against: a disk's or a copy's damage.
Integer sums are exact in any order, so the result does not depend on the device or threads.
"""
from __future__ import annotations

import json

import torch

WIDTH = 16
"""Words per row of the 2-D view summed both ways: with rows this short, both sums run near
the CPU's memory speed (longer rows make the column sums slower)."""
_MASK = (1 << 64) - 1
METADATA_KEY = "checksums"
"""The safetensors metadata entry holding them: a JSON object, tensor name -> checksum."""


def checksum(tensor: torch.Tensor) -> str:
    """S1 and S2 of the tensor's bytes, as 32 hexadecimal digits."""
    s1, s2 = sums(tensor)
    return f"{int(s1) & _MASK:016x}{int(s2) & _MASK:016x}"


def checksums(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """checksum of each tensor, read back from the device once for all of them."""
    keys = list(tensors)
    pairs = [torch.stack(sums(tensors[k])).cpu() for k in keys]
    return {k: f"{int(p[0]) & _MASK:016x}{int(p[1]) & _MASK:016x}" for k, p in zip(keys, pairs)}


def to_metadata(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """The metadata entry recording the tensors' checksums."""
    return {METADATA_KEY: json.dumps(checksums(tensors), separators=(",", ":"))}


def recorded(metadata: dict) -> dict[str, str]:
    """The checksums a file's metadata records; ValueError if it records none or is garbled."""
    text = metadata.get(METADATA_KEY)
    if not isinstance(text, str):
        raise ValueError("it records no checksums")
    try:
        found = json.loads(text)
    except RecursionError:  # nested too deep to be ours
        raise ValueError("its checksums are not a table of names and checksums") from None
    if not (isinstance(found, dict) and all(isinstance(v, str) for v in found.values())):
        raise ValueError("its checksums are not a table of names and checksums")
    return found


def mismatch(tensors: dict[str, torch.Tensor], expected: dict[str, str]) -> str | None:
    """What differs from the recorded checksums (a tensor without one, one that does not match),
    or None."""
    missing = sorted(set(tensors) ^ set(expected))
    if missing:
        return f"key {missing[0]} has no checksum recorded" if missing[0] in tensors else \
            f"key {missing[0]} has a checksum but no tensor"
    found = checksums(tensors)
    bad = next((k for k in tensors if found[k] != expected[k]), None)
    return None if bad is None else f"key {bad} does not match the checksum written with it"


def sums(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """S1, S2 as int64 tensors (wrapping) on the tensor's device."""
    data = tensor.detach().reshape(-1).view(torch.uint8)
    whole = data.numel() // 8 * 8
    words = _words(data[:whole])
    tail = data[whole:]
    if tail.numel():  # the last word, padded with zero bytes
        padded = torch.zeros(8, dtype=torch.uint8, device=data.device)
        padded[: tail.numel()] = tail
        words = torch.cat([words, padded.view(torch.int64)])
    return _weighted(words)


def _words(data: torch.Tensor) -> torch.Tensor:
    try:
        return data.view(torch.int64)
    except RuntimeError:  # not on an 8-byte boundary (a file's tensor after an odd-sized one)
        return data.clone().view(torch.int64)


def _weighted(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """S1 and S2, reading the words twice: as rows of WIDTH (word i in row k, column c,
    i = k WIDTH + c), S2 = WIDTH Σ k r_k + Σ (c + 1) col_c over the row sums r and the column
    sums col, and Σ k r_k = S2(r) - S1(r), the same sums of r, 1/WIDTH of the words. The
    words after the last whole row are weighted one by one."""
    rows = words.numel() // WIDTH
    device = words.device
    body, rest = words[: rows * WIDTH].view(rows, WIDTH), words[rows * WIDTH:]
    columns = body.sum(0)
    s1 = columns.sum() + rest.sum()
    if rows > WIDTH:
        r1, r2 = _weighted(body.sum(1))
        s2 = (r2 - r1) * WIDTH
    else:
        s2 = (torch.arange(rows, dtype=torch.int64, device=device) * body.sum(1)).sum() * WIDTH
    s2 = s2 + (torch.arange(1, WIDTH + 1, dtype=torch.int64, device=device) * columns).sum()
    positions = torch.arange(rows * WIDTH + 1, words.numel() + 1, dtype=torch.int64, device=device)
    return s1, s2 + (positions * rest).sum()
