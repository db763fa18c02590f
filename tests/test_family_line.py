"""The line between the runtime and its model families, held by reading the code. The session,
model loading, the registry, the protocol, the stage runner, the state's placements, every
module of the app (`offline` and the command line included) and the bench's generic part (its
report) name no family: no import of a family's package, no identifier or string naming Moshi,
PersonaPlex or DiffuPlex, no member of a loaded model or a conversation that
engine.families.protocol does not name, no getattr or hasattr probing of one. The rest of
bench/ measures the Moshi family against the stock Moshi runtime: it names them by subject."""
import ast
import re
from pathlib import Path

import pytest

from engine.families.protocol import DuplexModel, FamilyConversation

ROOT = Path(__file__).resolve().parents[1]
NAMES = re.compile(r"moshi|personaplex|diffuplex", re.IGNORECASE)
ALLOWED_FAMILY_MODULES = {"protocol"}
"""engine.families' own modules anyone may import (the registry is the package itself)."""
CLEAN = ["engine/session.py", "engine/loading/models.py", "engine/loading/memory_plan.py", "engine/persona.py",
         "engine/period.py", "engine/families/__init__.py", "engine/families/protocol.py", "bench/report.py",
         *sorted(str(p.relative_to(ROOT)) for folder in ("runtime", "state")
                 for p in (ROOT / "engine" / folder).glob("*.py")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "app").rglob("*.py"))]


def _members(protocol) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(protocol.__annotations__)


PROTOCOLS = {"model": _members(DuplexModel), "conversation": _members(FamilyConversation)}
"""What may be used of `session.model` (a loaded model) and of a conversation."""
PROBED = re.compile(r"\b(session|conversation|report|tally)\b|\.model\b")
"""What a getattr or hasattr may not look into: a family's objects, as the session hands them."""


def _outside_protocol(node: ast.Attribute) -> str | None:
    """`session.model.X` or `session.conversation.X` with X not in the protocol: its name, else None."""
    holder = node.value
    kind = holder.attr if isinstance(holder, ast.Attribute) else holder.id if isinstance(holder, ast.Name) else None
    if "session" not in ast.unparse(holder):
        return None  # the window's conversation controller, a Qt item model: not the family's
    if kind in PROTOCOLS and node.attr not in PROTOCOLS[kind]:
        return f"{kind}.{node.attr}"
    return None


def crossings(path: Path) -> list[str]:
    """Each place in the file that crosses the line: `line: what`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (outside := _outside_protocol(node)):
            found.append(f"{node.lineno}: uses {outside}, which the protocol does not name")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args and PROBED.search(ast.unparse(node.args[0])):
            found.append(f"{node.lineno}: probes {ast.unparse(node.args[0])} with {node.func.id}")
        if isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            parts = module.lstrip(".").split(".")
            if "families" in parts:
                below = parts[parts.index("families") + 1:]
                names = [a.name for a in node.names]
                if below and below[0] not in ALLOWED_FAMILY_MODULES or not below and set(names) - {
                        "Family", "families", "family_named", "family_of", "register_family", "conversation_for"}:
                    found.append(f"{node.lineno}: imports {module} ({', '.join(names)})")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if ".families." in a.name]
        text = None
        if isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.arg):
            text = node.arg
        elif isinstance(node, ast.alias):
            text = node.asname or node.name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        if text is not None and NAMES.search(text):
            found.append(f"{getattr(node, 'lineno', '?')}: names {NAMES.search(text).group()} ({text[:50]!r})")
    return found


@pytest.mark.parametrize("name", CLEAN)
def test_the_runtime_names_no_family(name):
    assert crossings(ROOT / name) == []


def test_the_scan_sees_a_crossing(tmp_path):
    assert crossings(ROOT / "engine" / "families" / "moshi" / "conversation.py")
    probing = tmp_path / "probing.py"
    probing.write_text("def f(session):\n    return session.model.lm, getattr(session.conversation, 'frame', None)\n")
    assert [line.split(": ", 1)[1] for line in crossings(probing)] == [
        "uses model.lm, which the protocol does not name", "probes session.conversation with getattr"]
