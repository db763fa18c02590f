"""Official checkpoints: reading safetensors with errors that name file, key and shape, and the
on-disk layout of attention weights."""
from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import CheckpointError

_progress = threading.local()


def progress_callback() -> Callable[[str, int, int], None] | None:
    """The callback `reporting_progress` installed on this thread, or None."""
    return getattr(_progress, "callback", None)


@contextlib.contextmanager
def reporting_progress(callback: Callable[[str, int, int], None]):
    """Within the block, on this thread, each checkpoint copied into a module reports after every
    tensor: callback(file name, bytes copied so far, bytes in all). Copying is where a file's
    bytes are read from disk (the tensors are memory-mapped), so this is the load's progress."""
    _progress.callback = callback
    try:
        yield
    finally:
        _progress.callback = None


def read_safetensors(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file; any problem raises CheckpointError naming the file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    if not path.is_file():
        raise CheckpointError(f"{path}: not a file")
    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
           "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
           "BOOL": torch.bool}


def read_safetensors_layout(path: str | Path) -> dict[str, torch.Tensor]:
    """A safetensors file's keys, shapes and dtypes as meta tensors, reading only its header."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            out = {}
            for key in f.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                view = f.get_slice(key)
                dtype = _DTYPES.get(view.get_dtype())
                if dtype is None:
                    raise CheckpointError(f"{path}: key {key} has unsupported dtype {view.get_dtype()}")
                out[key] = torch.empty(view.get_shape(), dtype=dtype, device="meta")
            return out
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def load_into(module: torch.nn.Module, tensors: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """Copy `tensors` into `module`'s parameters and buffers, checking keys and shapes.

    `tensors` is already in the module's own key layout; `path` is only for messages.
    """
    own = module.state_dict(keep_vars=True)  # parameters and persistent buffers
    check_layout(module, tensors, path)
    for key, target in own.items():
        src = tensors[key]
        if target.dtype == torch.int8 and src.dtype != torch.int8:
            raise CheckpointError(f"{path}: key {key} has dtype {src.dtype}, expected int8 (the q8 layout)")
        if not (src.dtype.is_floating_point or src.dtype == target.dtype):
            raise CheckpointError(f"{path}: key {key} has dtype {src.dtype}, expected floating point")
        # amax/amin carry a NaN or an infinity through, and unlike isfinite allocate no mask
        # the size of the tensor (5-9x faster on a 7B checkpoint on the CPU).
        if src.dtype.is_floating_point and src.numel() and not (
                torch.isfinite(src.amax()) and torch.isfinite(src.amin())):
            raise CheckpointError(f"{path}: key {key} holds NaN or infinite values")
    report = progress_callback()
    total, done, name = sum(tensors[key].nbytes for key in own), 0, Path(path).name
    with torch.no_grad():
        for key, target in own.items():
            target.copy_(tensors[key])
            if report:
                done += tensors[key].nbytes
                report(name, done, total)


def check_layout(module: torch.nn.Module, tensors: Mapping[str, torch.Tensor], path: str | Path) -> None:
    """`tensors` has `module`'s keys with its shapes, else CheckpointError naming `path`. Cheap
    on a module built on the meta device: a loader checks a file against its config this way
    before it allocates what the config asks for."""
    own = module.state_dict(keep_vars=True)
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if missing:
        raise CheckpointError(f"{path}: missing key {missing[0]}" + _more(missing))
    if unexpected:
        raise CheckpointError(f"{path}: unexpected key {unexpected[0]}" + _more(unexpected))
    for key, target in own.items():
        if tuple(tensors[key].shape) != tuple(target.shape):
            raise CheckpointError(
                f"{path}: key {key} has shape {list(tensors[key].shape)}, expected {list(target.shape)}")


def _more(keys: list[str]) -> str:
    return f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""


_SPLIT = re.compile(r"^(.*)\.(in_projs|out_projs)\.(\d+)\.weight(_scb)?$")


def official_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Stack the reference's split attention weights (`in_projs.{i}` / `out_projs.{i}`, split by
    its load hook) back as stored on disk (`in_proj_weight` / `out_proj.weight`), int8 ones'
    `_scb` scales too."""
    out, stacks = {}, {}
    for key, value in state.items():
        m = _SPLIT.match(key)
        if m:
            prefix, kind, idx, scb = m.groups()
            name = (f"{prefix}.in_proj_weight" if kind == "in_projs" else f"{prefix}.out_proj.weight") + (scb or "")
            stacks.setdefault(name, []).append((int(idx), value))
        else:
            out[key] = value.detach().contiguous()
    for name, parts in stacks.items():
        out[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])])
    return out
