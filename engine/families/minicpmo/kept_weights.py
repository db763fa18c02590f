"""MiniCPM-o's int8 and int4 weights quantized once and kept: a load in either format reads the
quantized products and embedding table from the copy kept of the checkpoint (its other tensors
from the shards, as a bf16 load does), or quantizes them while loading, as quantized.py says,
and keeps them (engine.weights.kept_files). A copy is named after the index file
(engine.weights.int4_copies: so Remove takes it with the model) and records every audio shard's
size and modification time; a stale one is made again, a damaged one (a tensor unlike its
checksum, a shape the configuration does not imply) too, with a notice. Where no copy can be
kept (disk space, a folder that cannot be written) the load quantizes in memory, as before,
and says so."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ...kernels.operands import INT4_SCALE, INT8_ROW_SCALE, Int4Weight, Int8Rows, Int8Weight
from ...weights.checksums import mismatch, recorded
from ...weights.int4 import int4_metadata
from ...weights.int4_copies import COPY_FORMAT, SourceFile, copy_path, header_metadata, is_current
from ...weights.int8 import SCB
from ...weights.kept_files import cannot_keep, discard, write_copy
from .host_tables import HOST
from .layout import INDEX, audio_shards, read_weights
from .quantized import QUANTIZER, converter, is_quantized

log = logging.getLogger(__name__)
_HEADER_BYTES = 1 << 20


def read_audio_weights(folder: Path, expected: dict[str, tuple[int, ...]], device: torch.device,
                       dtype: torch.dtype, weights: str, host: frozenset[str] = frozenset()) -> tuple[dict, str]:
    """The audio path's tensors in `weights` (read_weights' checks first; the keys in `host` on the
    host), and what the user should know about the kept copy ("" for nothing)."""
    convert = converter(weights)
    if convert is None:
        return read_weights(folder, expected, device, dtype, host=host), ""
    try:
        sources = [SourceFile.of(folder / INDEX)] + [SourceFile.of(folder / s) for s in audio_shards(folder)]
    except OSError as exc:  # read_weights names the file that cannot be read
        log.info("%s: no kept copy (%s)", folder, exc)
        return read_weights(folder, expected, device, dtype, convert, host), ""
    copy = copy_path(sources[0], device.type, weights=weights)
    record = _record(sources, device, weights)
    tensors, damage = _read_copy(copy, record, folder, expected, device, dtype, host)
    if tensors is not None:
        return tensors, ""
    tensors = read_weights(folder, expected, device, dtype, convert, host)
    kept = _flat(tensors)
    problem = cannot_keep(copy, _HEADER_BYTES + sum(t.nbytes for t in kept.values()))
    if problem is None:
        try:
            write_copy(kept, copy, record)
        except (OSError, SafetensorError) as exc:  # the disk filled meanwhile, a name in the way
            problem = f"writing {copy} failed ({getattr(exc, 'strerror', None) or exc})"
    if problem is None:
        log.info("%s: quantized to %s once, kept as %s", folder, weights, copy)
        return tensors, f"its {weights} copy was damaged ({damage}); quantized again and kept" if damage else ""
    notice = f"{weights} weights not kept: {problem}; quantized in memory for this load"
    log.warning("%s: %s", folder, notice)
    return tensors, f"its {weights} copy was damaged ({damage}); {notice}" if damage else notice


def _record(sources: list[SourceFile], device: torch.device, weights: str) -> dict[str, str]:
    """What a copy records of where it came from: the index as its source, every shard, the
    device type and the quantizer's version."""
    shards = json.dumps([s.metadata() for s in sources[1:]], separators=(",", ":"))
    layout = int4_metadata() if weights == "int4" else {"quantizer": QUANTIZER}
    return {**layout, **sources[0].metadata(), "shards": shards, "quantized_on": device.type, "weights": weights,
            "copy_format": COPY_FORMAT}


def _flat(tensors: dict) -> dict[str, torch.Tensor]:
    """The quantized entries as the copy's tensors: the integer weights under their key, the
    scales under the key and their suffix."""
    out = {}
    for key, value in tensors.items():
        if isinstance(value, Int8Weight):
            out[key], out[key + SCB] = value.q, value.scb
        elif isinstance(value, Int4Weight):
            out[key], out[key + INT4_SCALE] = value.q, value.scale
        elif isinstance(value, Int8Rows):
            out[key], out[key + INT8_ROW_SCALE] = value.q, value.scale
    return out


def _read_copy(copy: Path, record: dict[str, str], folder: Path, expected: dict, device: torch.device,
               dtype: torch.dtype, host: frozenset[str]) -> tuple[dict | None, str]:
    """The tensors with the quantized ones from the copy, or None, and what was wrong with a
    damaged copy ("" for none, and for a stale one, discarded quietly)."""
    if not copy.is_file():
        return None, ""
    try:
        meta = header_metadata(copy)
    except (OSError, ValueError) as exc:
        return discard(copy, f"not a readable safetensors file ({exc})")
    if not (is_current(meta) and record.items() <= meta.items()):
        return discard(copy, "made from other files, on another device or by another version", quiet=True)
    try:
        with safe_open(str(copy), framework="pt") as f:
            flat = {key: f.get_tensor(key).to(HOST if _base(key) in host else device)
                    for key in f.keys()}  # noqa: SIM118 (not iterable)
        quantized = _unflat(flat)
        problem = mismatch(flat, recorded(meta)) or _shape_problem(quantized, expected)
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        problem = f"not a readable safetensors file ({exc})"
    if problem:
        return discard(copy, problem)
    tensors = read_weights(folder, {k: s for k, s in expected.items() if k not in quantized}, device, dtype,
                           host=host)
    log.info("%s: %s weights read from the kept copy %s", folder, record["weights"], copy)
    return {key: quantized.get(key, tensors.get(key)) for key in expected}, ""


def _base(key: str) -> str:
    """The checkpoint key a copy's tensor belongs to (a scale's key less its suffix)."""
    for suffix in (SCB, INT4_SCALE, INT8_ROW_SCALE):
        if key.endswith(suffix):
            return key[:-len(suffix)]
    return key


def _unflat(flat: dict[str, torch.Tensor]) -> dict:
    out = {}
    for key, q in flat.items():
        if key + SCB in flat:
            out[key] = Int8Weight(q, flat[key + SCB])
        elif key + INT4_SCALE in flat:
            out[key] = Int4Weight(q, flat[key + INT4_SCALE])
        elif key + INT8_ROW_SCALE in flat:
            out[key] = Int8Rows(q, flat[key + INT8_ROW_SCALE])
    return out


_KINDS = {Int8Weight: (torch.int8, torch.float32), Int4Weight: (torch.uint8, torch.bfloat16),
          Int8Rows: (torch.int8, torch.float32)}


def _shape_problem(quantized: dict, expected: dict) -> str | None:
    """What in the copy's quantized weights is not what quantizing the configuration's tensors
    gives, or None."""
    wanted = {key for key in expected if is_quantized(key)}
    if set(quantized) != wanted:
        odd = sorted(set(quantized) ^ wanted)[0]
        return f"key {odd} is {'missing' if odd in wanted else 'not one it quantizes'}"
    for key, value in quantized.items():
        rows, columns = expected[key]
        scales = (rows, -(-columns // value.group)) if isinstance(value, Int4Weight) else (rows,)
        shape = (value.q.shape[0], 2 * value.q.shape[1]) if isinstance(value, Int4Weight) else tuple(value.q.shape)
        if shape != (rows, columns) or tuple(value[1].shape) != scales:
            return f"key {key} has shape {shape}, the config implies {(rows, columns)}"
        if (value[0].dtype, value[1].dtype) != _KINDS[type(value)]:
            return f"key {key} is {value[0].dtype} with {value[1].dtype} scales"
    return None
