"""The line between the runtime and its model families, held by reading the code: the session,
model loading, the registry, the protocol, the stage runner, the state's placements, `offline`
and the bench report name no family (no import of a family's package, no identifier or string
naming Moshi, PersonaPlex or DiffuPlex). The app and the bench's runner still do, as recorded
below, while the families are made one package each: a file may only go down from its count
(and its count with it)."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMES = re.compile(r"moshi|personaplex|diffuplex", re.IGNORECASE)
ALLOWED_FAMILY_MODULES = {"protocol"}
"""engine.families' own modules anyone may import (the registry is the package itself)."""
CLEAN = ["engine/session.py", "engine/model_loading.py", "engine/memory_plan.py", "engine/persona.py",
         "engine/frame.py", "engine/families/__init__.py", "engine/families/protocol.py", "app/offline.py",
         "bench/report.py",
         *sorted(str(p.relative_to(ROOT)) for folder in ("runtime", "state")
                 for p in (ROOT / "engine" / folder).glob("*.py"))]
RECORDED = {
    "app/app_settings.py": 3,
    "app/cadence_panel.py": 18,
    "app/cli.py": 25,
    "app/cli_models.py": 2,
    "app/conversation.py": 2,
    "app/conversation_controller.py": 1,
    "app/engine_pane.py": 1,
    "app/model_controller.py": 3,
    "app/model_loader.py": 5,
    "app/model_picker.py": 2,
    "app/persona_presets.py": 4,
    "app/plain_words.py": 2,
    "app/prompt_progress.py": 1,
    "app/runtime_controls.py": 7,
    "app/settings_dialog.py": 1,
    "bench/run.py": 12,
}
"""Files still naming a family -> how many places do (the next steps of the family package)."""


def crossings(path: Path) -> list[str]:
    """Each place in the file that names a family: `line: what`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
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


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_what_still_names_a_family_only_shrinks(name):
    found = crossings(ROOT / name)
    assert len(found) <= RECORDED[name], "a new crossing:\n" + "\n".join(found)
    assert len(found) == RECORDED[name], f"fewer crossings now: record {len(found)} for {name}"


def test_the_scan_sees_a_crossing():
    assert crossings(ROOT / "engine" / "families" / "moshi" / "conversation.py")
