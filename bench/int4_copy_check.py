"""What comparing a kept int4 copy with its checksums costs: cold loads of a copy, with and
without the check.

`python3 -m bench.int4_copy_check --output OUT.json [--device cuda] [--shape moshiko]` writes a
copy of the shape's LM in the int4 layout (the config's tensor names, shapes and dtypes, the
float ones in bf16 as the official checkpoints hold them) through engine.weights.kept_files.write_copy,
its checksums included, filled with random bytes: quantizing a 7B checkpoint takes far longer
than the check, whose cost does not depend on the values. Then it reads it as a load does
(engine.weights.int4_kept.read_kept), the file's pages dropped from the page cache before each load
(fsync, then POSIX_FADV_DONTNEED), checked and unchecked in turn, `--repeats` times; and, warm,
the check alone: the file's tensors summed on the CPU, the loaded parameters on the device.
The copy is written to --folder (default: a temporary folder in the system's), then removed.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from engine.families.moshi.lm.lm_config import CONFIGS
from engine.families.moshi.lm.moshi_lm import MoshiLM
from engine.loading.safetensors_files import read_safetensors
from engine.weights.checksums import checksums
from engine.weights.int4 import ROW_SCALE, SCALE, int4_layout, int4_metadata
from engine.weights.int4_copies import COPY_FORMAT
from engine.weights.int4_kept import read_kept
from engine.weights.kept_files import write_copy

SHAPES = ("moshiko", "personaplex")


def layout_tensors(shape: str, seed: int) -> dict[str, torch.Tensor]:
    """Random tensors with the names, shapes and dtypes of the shape's int4 copy."""
    with torch.device("meta"):
        lm = MoshiLM(CONFIGS[shape])
    int4_layout(lm)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, own in lm.state_dict().items():
        if not own.dtype.is_floating_point:  # packed weights, int8 tables: any byte is a value
            out[key] = torch.randint(-128, 128, own.shape, dtype=torch.int8, generator=g).view(own.dtype)
        elif key.endswith(SCALE):
            out[key] = (torch.rand(own.shape, generator=g) * 1e-3).to(own.dtype)
        elif key.endswith(ROW_SCALE):
            out[key] = torch.rand(own.shape, generator=g) * 1e-2
        else:  # norms and any other float tensor, as the checkpoint holds them
            out[key] = (1 + torch.randn(own.shape, generator=g) * 0.1).to(torch.bfloat16)
    return out


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cold_load(copy: Path, shape: str, device: torch.device, dtype: torch.dtype, check: bool) -> float:
    drop_from_page_cache(copy)
    gc.collect()
    start = time.perf_counter()
    lm = read_kept(copy, CONFIGS[shape], device, dtype, check=check)
    _sync(device)
    seconds = time.perf_counter() - start
    del lm
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return seconds


def check_alone(copy: Path, shape: str, device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """Seconds of the sums alone, the file warm in the page cache: of the file's tensors on the
    CPU, and of the loaded parameters on the device (what each kind of device's load adds
    where nothing overlaps it)."""
    tensors = read_safetensors(copy)
    checksums(tensors)  # its pages into the cache
    start = time.perf_counter()
    checksums(tensors)
    file_s = time.perf_counter() - start
    lm = read_kept(copy, CONFIGS[shape], device, dtype, check=False)
    params = lm.state_dict()
    checksums(params)
    _sync(device)
    start = time.perf_counter()
    checksums(params)
    _sync(device)
    return {"file_tensors_on_cpu_s": file_s, "parameters_on_device_s": time.perf_counter() - start}


def measure(args) -> dict:
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # load_model's defaults
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        copy = Path(tmp) / f"{args.shape}.{device.type}.int4.safetensors"
        start = time.perf_counter()
        tensors = layout_tensors(args.shape, args.seed)
        write_copy(tensors, copy, {**int4_metadata(), "quantized_on": device.type, "copy_format": COPY_FORMAT})
        written_s = time.perf_counter() - start
        count, nbytes = len(tensors), sum(t.nbytes for t in tensors.values())
        del tensors
        loads: dict[str, list[float]] = {"unchecked": [], "checked": []}
        for repeat in range(args.repeats):
            for check in (repeat % 2 == 0, repeat % 2 == 1):  # each first in turn: drift cancels
                kind = "checked" if check else "unchecked"
                loads[kind].append(cold_load(copy, args.shape, device, dtype, check))
                print(f"cold load, {kind}: {loads[kind][-1]:.2f} s", file=sys.stderr, flush=True)
        alone = check_alone(copy, args.shape, device, dtype)
        file_bytes = copy.stat().st_size
    median = {k: statistics.median(v) for k, v in loads.items()}
    return {
        "command": " ".join(["python3 -m bench.int4_copy_check", *sys.argv[1:]]),
        "shape": args.shape, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "cpu_threads": torch.get_num_threads(), "torch": torch.__version__,
        "values": "random bytes in the real int4 layout (not quantized weights)",
        "file_bytes": file_bytes, "tensors": count, "tensor_bytes": nbytes, "written_s": written_s,
        "cold_load_s": loads, "cold_load_median_s": median,
        "check_cost_fraction": (median["checked"] - median["unchecked"]) / median["unchecked"],
        "check_alone_warm": alone,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.int4_copy_check", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="moshiko", help="the LM's shape (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="where the copy is loaded: cpu or cuda (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="cold loads of each kind (default: %(default)s)")
    parser.add_argument("--folder", type=Path, help="where the copy is written (its disk is the one measured)")
    parser.add_argument("--seed", type=int, default=0, help="the random bytes' seed (default: %(default)s)")
    parser.add_argument("--output", type=Path, help="the JSON report (also printed)")
    args = parser.parse_args(argv)
    report = measure(args)
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.write_text(text)
    print(text)
    print(f"the check costs {report['check_cost_fraction']:+.1%} of a cold load "
          f"({report['cold_load_median_s']['checked']:.2f} s checked, "
          f"{report['cold_load_median_s']['unchecked']:.2f} s unchecked, medians)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
