"""Reading PyTorch `.pt` files (pickles) as plain tensors only: torch's weights-only unpickler
refuses anything else (objects, code to run), and its refusal becomes one line naming the
file instead of torch's advice to turn the check off."""
from __future__ import annotations

import pickle
import pickletools
import re
import warnings
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError

_REFUSED = "Weights only load failed"
"""How torch's weights-only unpickler begins its refusal (torch 2.4 to 2.13)."""
_GLOBAL = re.compile(r"GLOBAL\s+([\w.<>]+)")
"""How the refusal names a class or function the file would have it build or call."""
_OPERAND = re.compile(r"Unsupported operand (\d+)")


def load_pt(path: str | Path, what: str) -> object:
    """The tensors (in dicts, lists, tuples) a `.pt` file holds, on the CPU; a zip-format file
    is mapped, not read, so its tensors cost nothing until used. Any problem raises
    CheckpointError naming `path`; `what` says what the file should be ("voice prompt")."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        with warnings.catch_warnings():  # torch warns of old pickle protocols: not the user's to read
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as exc:
        text = str(exc)
        found = _GLOBAL.search(text) if text.startswith(_REFUSED) else None
        if found:
            raise CheckpointError(f"{path}: holds code or objects that are not plain tensors ({found.group(1)}); "
                                  f"refused, not run (a {what} holds tensors only)") from None
        foreign = _foreign_global(path) if not found else None
        if foreign:  # refused at an operation before it met the call (a plain pickle's framing)
            raise CheckpointError(f"{path}: holds code or objects that are not plain tensors ({foreign}); "
                                  f"refused, not run (a {what} holds tensors only)") from None
        operand = _OPERAND.search(text)
        detail = f"pickle operation {operand.group(1)} is not one a file of tensors uses" if operand \
            else _first_line(text)
        raise CheckpointError(f"{path}: not a readable {what} ({detail})") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable {what} ({_first_line(str(exc))})") from None


_SCANNED_BYTES = 64 << 20
"""A pickle scanned for what it would call is read into memory: at most this much of it."""
_TENSOR_GLOBALS = ("torch.", "collections.OrderedDict", "_codecs.encode", "builtins.set")


def _foreign_global(path: Path) -> str | None:
    """The first class or function outside torch's own tensor rebuilding that the pickle names,
    found by reading its operations (pickletools parses, it runs nothing); None if none is
    found or the file cannot be parsed."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                pickled = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                data = archive.open(pickled).read(_SCANNED_BYTES) if pickled else b""
        else:
            with open(path, "rb") as f:
                data = f.read(_SCANNED_BYTES)
        strings: list[str] = []
        for op, arg, _ in pickletools.genops(data):
            name = None
            if op.name in ("GLOBAL", "INST"):
                name = str(arg).replace(" ", ".")
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                name = f"{strings[-2]}.{strings[-1]}"
            elif isinstance(arg, str):
                strings.append(arg)
            if name and not name.startswith(_TENSOR_GLOBALS):
                return name
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError):
        return None
    return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no details"
