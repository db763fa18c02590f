"""Checks shared by the configuration readers: JSON values typed and bounded as the configs
need them, and JSON files read with errors that name the file.

Every number that sizes a module, a table or a state ring is checked against a bound before
anything is built: a config file is small, but its numbers decide how much memory the loader
asks for. The bounds sit well above the released models' values (noted beside each) and far
below what would exhaust a machine."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

MAX_CONFIG_BYTES = 1 << 20
"""A config file's size: the released ones are a few kilobytes."""
MAX_DEPTH = 16
"""Nesting of objects and lists in a config: the released ones nest 3 deep. Checked before any
recursive code walks the data (a 100,000-deep file would overflow Python's stack)."""


def is_int(v: Any) -> bool:
    """An integer that is not a bool (JSON true/false must not pass as 1/0)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return is_int(v) or isinstance(v, float)


def bounded_int(value: Any, key: str, source: str, low: int, high: int) -> int:
    """`value` if it is an integer in low..high, else CheckpointError naming `source`, `key` and
    the bound."""
    if not is_int(value):
        raise CheckpointError(f"{source}: {key} = {shown(value)} must be an integer")
    _in_range(value, key, source, low, high)
    return value


def bounded_float(value: Any, key: str, source: str, low: float, high: float) -> float:
    """`value` (an int or a finite float) as a float in low..high, else CheckpointError."""
    if not is_number(value):
        raise CheckpointError(f"{source}: {key} = {shown(value)} must be a number")
    if not math.isfinite(value):
        raise CheckpointError(f"{source}: {key} = {shown(value)} must be a finite number")
    _in_range(value, key, source, low, high)
    return float(value)


def _in_range(value, key: str, source: str, low, high) -> None:
    if value > high:
        raise CheckpointError(f"{source}: {key} = {shown(value)} is out of range (at most {high})")
    if value < low:
        raise CheckpointError(f"{source}: {key} = {shown(value)} is out of range (at least {low})")


def shown(value: Any) -> str:
    """`value` for a message: short, and never failing (Python will not write an integer of
    more than 4300 digits, which YAML's hexadecimal can give)."""
    if is_int(value) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except ValueError:
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def check_depth(data: Any, source: str, limit: int = MAX_DEPTH) -> None:
    """CheckpointError if lists and objects in `data` nest deeper than `limit`; walks the data
    with a stack of its own, so any depth is measured without recursion."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= limit:
                raise CheckpointError(f"{source}: nested deeper than {limit} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


_JSON_MARKS = re.compile(r'[\[\]{}"\\]')


def check_json_nesting(text: str, source: str, limit: int = MAX_DEPTH) -> None:
    """CheckpointError if JSON text opens lists and objects deeper than `limit`, found by
    scanning its brackets outside strings before anything parses it (json's own parser
    recurses once a level: 100,000 levels would overflow the stack)."""
    depth, in_string, skip = 0, False, -1
    for mark in _JSON_MARKS.finditer(text):
        char, at = mark.group(), mark.start()
        if at == skip:  # the character after a backslash in a string
            continue
        if in_string:
            if char == "\\":
                skip = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise CheckpointError(f"{source}: nested deeper than {limit} levels")
        elif char in "]}":
            depth -= 1


def parse_json(text: str, source: str) -> Any:
    """JSON text (a file's, or a metadata string's) as data, its nesting checked before it is
    parsed; problems raise CheckpointError naming `source`."""
    check_json_nesting(text, source)
    try:
        data = json.loads(text)
    except ValueError as exc:  # a syntax error, or an integer of more digits than Python converts
        raise CheckpointError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})") from None
    return data


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from `path`; anything else raises CheckpointError naming the file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path}: {size} bytes is too large for a config file "
                                  f"(at most {MAX_CONFIG_BYTES})")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    data = parse_json(text, str(path))
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data
