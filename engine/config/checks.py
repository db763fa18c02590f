"""Checks shared by the configuration readers: JSON values typed as the configs need them,
and JSON files read with errors that name the file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CheckpointError


def is_int(v: Any) -> bool:
    """An integer that is not a bool (JSON true/false must not pass as 1/0)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return is_int(v) or isinstance(v, float)


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from `path`; anything else raises CheckpointError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data
