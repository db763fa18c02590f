"""Int4 weights quantized once and kept: an int4 load of a bf16 or q8 LM file reads the kept
copy of it (engine.weights.int4_copies), or makes one with exactly the quantization a load would do
(engine.weights.int4's own functions) and then reads it. Where a copy cannot be kept (too little
free space, a folder that cannot be written), the LM is quantized in memory as before, with
a one-line warning for the log and the user. Every tensor of a copy is compared with the
checksum written with it as it is read (engine.weights.checksums); a damaged copy is made
again, and the load's notice says so."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors import SafetensorError

from ..errors import CheckpointError
from ..families.moshi.lm.lm_config import LMConfig
from ..families.moshi.lm.lm_loading import build_lm, weights_choice
from ..families.moshi.lm.moshi_lm import MoshiLM
from ..loading import safetensors_files
from ..loading.safetensors_files import check_layout, read_safetensors
from .checksums import mismatch, recorded
from .int4 import SCALE, int4_layout, int4_metadata, is_int4, quantize_checkpoint4
from .int4_copies import COPY_FORMAT, SourceFile, copy_path, is_current, read_header
from .kept_files import cannot_keep, discard, write_copy

log = logging.getLogger(__name__)
_HEADER_BYTES = 1 << 20
SUMMED_BESIDE_FROM = {"cpu": 256 << 20}
"""Device types whose copies of at least this size are summed from the file by a thread while
the load reads it: on the CPU, a pass over the parameters afterwards would add all its time,
while the thread's reads, in file order, run ahead of the load's. Other copies are summed once
loaded, over the parameters where they landed: a GPU sums them in microseconds, and on a small
copy the thread's switches cost more than its sums."""


class DamagedCopy(CheckpointError):
    """A kept copy whose bytes differ from the checksums written with them."""


def load_kept_int4(cfg: LMConfig, tensors: dict, lm_path: Path, device: torch.device, dtype: torch.dtype
                   ) -> tuple[MoshiLM, str]:
    """The LM with int4 weights from a bf16 or q8 checkpoint's `tensors` (read from `lm_path`),
    and what the user should know about it ("" for nothing)."""
    choice = weights_choice(lm_path)  # build_lm says it only of the file it reads
    if choice:
        log.warning("%s", choice)
    source = SourceFile.of(lm_path)
    copy = copy_path(source, device.type)
    layout, names = _int4_module(cfg)
    lm, damage = _read_copy(copy, source, cfg, device, dtype)
    if lm is not None:
        return lm, ""
    damage = damage and f"{lm_path}: its int4 copy {copy} was damaged ({damage})"
    problem = cannot_keep(copy, _file_bytes(layout, tensors))
    if problem is None:
        quantized = _quantize(tensors, names, device, lm_path.name)
        check_layout(layout, quantized, lm_path)  # a checkpoint that does not fit is named, never kept
        try:
            write_copy(quantized, copy, {**int4_metadata(), **source.metadata(), "quantized_on": device.type,
                                     "copy_format": COPY_FORMAT})
        except (OSError, SafetensorError) as exc:  # the disk filled meanwhile, a name in the way
            problem = f"writing {copy} failed ({getattr(exc, 'strerror', None) or exc})"
        del quantized
    if problem is not None:
        notice = f"{lm_path}: int4 weights not kept: {problem}; quantized in memory for this load"
        log.warning("%s", notice)
        # After a failed write this quantizes a second time: build_lm takes int4 tensors only
        # with the file whose metadata describes them.
        lm = build_lm(cfg, tensors, lm_path, device, dtype, "int4")
        return lm, f"{damage}; {notice.removeprefix(f'{lm_path}: ')}" if damage else notice
    log.info("%s: quantized to int4 once, kept as %s", lm_path, copy)
    try:
        return read_kept(copy, cfg, device, dtype), f"{damage}; quantized again and kept" if damage else ""
    except DamagedCopy as exc:  # changed between its writing and its reading: the disk or memory
        message = f"{exc} right after it was written"
    except CheckpointError as exc:  # the source's values (a NaN), found reading what was made of it
        message = str(exc).replace(f"{copy}: ", f"{lm_path}: ", 1)
    discard(copy, "its first load failed")
    raise CheckpointError(message)


def _int4_module(cfg: LMConfig) -> tuple[MoshiLM, list[str]]:
    """The LM on the meta device in the int4 layout (its keys and shapes, allocating nothing),
    and the names of its quantized parameters, as build_lm quantizes them."""
    with torch.device("meta"):
        lm = MoshiLM(cfg)
    return lm, int4_layout(lm)


def _read_copy(copy: Path, source: SourceFile, cfg: LMConfig, device, dtype) -> tuple[MoshiLM | None, str]:
    """The LM from the kept copy, or None where there is none to read, and what was wrong with
    a damaged one ("" for none): a stale one (its source changed, another version's layout or
    format) is discarded quietly, a damaged one with a warning."""
    if not copy.is_file():
        return None, ""
    try:
        meta = read_header(copy).get("__metadata__")
        meta = meta if isinstance(meta, dict) else {}
    except (OSError, ValueError) as exc:
        return discard(copy, f"not a readable safetensors file ({exc})")
    if meta.get("copy_format") != COPY_FORMAT:
        return discard(copy, "made by an earlier version, without checksums", quiet=True)
    if not (is_current(meta) and meta.get("source") == str(source.path)):
        return discard(copy, "made from an earlier version of the source file", quiet=True)
    if not {**int4_metadata(), "quantized_on": device.type}.items() <= meta.items():
        return discard(copy, "made in another int4 layout", quiet=True)
    try:
        lm = read_kept(copy, cfg, device, dtype)
    except CheckpointError as exc:
        problem = str(exc).removeprefix(f"{copy}: ")
    else:
        log.info("%s: int4 weights read from the kept copy %s", source.path, copy)
        return lm, ""
    # Discarded once its mapped tensors are gone with the failed call (Windows deletes no
    # mapped file).
    return discard(copy, problem)


def read_kept(copy: Path, cfg: LMConfig, device: torch.device, dtype: torch.dtype, check: bool = True) -> MoshiLM:
    """The LM from a kept copy, every tensor compared with the checksum written with it
    (DamagedCopy names the first that differs; `check` False, for bench.int4_copy_check: none).
    A large copy on the CPU is summed by a thread, the file's tensors in file order, while the
    load copies them (its reads run ahead of the load's, which waits less for the disk); the
    others are summed once loaded, the parameters where they landed (SUMMED_BESIDE_FROM)."""
    try:
        header = read_header(copy)
        expected = recorded(header.get("__metadata__") or {}) if check else {}
    except (OSError, ValueError) as exc:
        raise DamagedCopy(f"{copy}: {exc}") from None
    tensors = read_safetensors(copy)
    if not is_int4(tensors):  # build_lm would quantize it, not read it
        raise CheckpointError(f"{copy}: holds no int4 weights")
    if not check:
        return build_lm(cfg, tensors, copy, device, dtype, "int4")
    with ThreadPoolExecutor(1, thread_name_prefix="int4-copy-check") as pool:  # a thread only once submitted to
        beside = None
        if copy.stat().st_size >= SUMMED_BESIDE_FROM.get(device.type, float("inf")):
            in_file = sorted(tensors, key=lambda k: header[k]["data_offsets"][0])
            beside = pool.submit(mismatch, {k: tensors[k] for k in in_file}, expected)
        try:
            lm = build_lm(cfg, tensors, copy, device, dtype, "int4")  # the layout, keys and shapes checked
        except CheckpointError:  # a damaged value (a NaN) is named as damage
            _damaged(copy, beside.result() if beside else mismatch(tensors, expected))
            raise
        if beside:
            _damaged(copy, beside.result())
            return lm
    landed = lm.state_dict()  # cast ones (float tensors in another dtype) from the file
    _damaged(copy, mismatch({k: landed[k] if landed[k].dtype == t.dtype else t for k, t in tensors.items()}, expected))
    return lm


def _damaged(copy: Path, problem: str | None) -> None:
    if problem:
        raise DamagedCopy(f"{copy}: {problem}")



def _file_bytes(layout: MoshiLM, tensors: dict) -> int:
    """The size the copy will have: the layout's own tensors (integer weights, their scales)
    at their sizes, the rest as the checkpoint holds them."""
    total = _HEADER_BYTES
    for key, own in layout.state_dict(keep_vars=True).items():
        source = tensors.get(key)
        kept_as_is = source is not None and own.dtype.is_floating_point and not key.endswith(SCALE)
        total += source.nbytes if kept_as_is else own.nbytes
    return total


def _quantize(tensors: dict, names: list[str], device: torch.device, label: str) -> dict:
    """quantize_checkpoint4 a parameter at a time (it quantizes each one alone: the result is
    the same), reporting the checkpoint's bytes done through the load's progress
    (engine.reporting_progress)."""
    report = safetensors_files.progress_callback()
    label = f"{label} → int4 (once, then kept)"
    sizes = [tensors[n].nbytes if n in tensors else 0 for n in names]
    done = 0
    for name, size in zip(names, sizes):
        tensors = quantize_checkpoint4(tensors, [name], device)
        done += size
        if report:
            report(label, done, sum(sizes))
    return tensors
