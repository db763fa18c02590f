"""The layer table of docs/architecture.md is a rule, not prose: every import in engine/, app/
and bench/ goes to the importer's own layer or one its row lists. A file is in the layer whose
`where` names the longest prefix of its path; every file is in one."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def read_table() -> tuple[dict[str, str], dict[str, set[str]]]:
    """(path prefix -> layer, layer -> the layers it may import) from the table. A layer may
    take several rows (their rules must agree); "below" is every layer of the rows before it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    where, may, order = {}, {}, []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---"):
            continue
        layer, paths, allowed = cells
        for path in re.findall(r"`([^`]+)`", paths):
            assert path not in where, f"{path} is in two layers"
            where[path] = layer
        if layer not in order:
            order.append(layer)
        rule = set(order[:order.index(layer)]) if allowed == "below" else \
            set() if allowed == "—" else {a.strip() for a in allowed.split(",")}
        assert may.setdefault(layer, rule) == rule, f"{layer}: its rows give different rules"
    return where, may


WHERE, MAY = read_table()


def layer_of(path: str) -> str | None:
    best = max((p for p in WHERE if path == p or (p.endswith("/") and path.startswith(p))), key=len, default=None)
    return None if best is None else WHERE[best]


def _module_file(module: str) -> str | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return str(candidate.relative_to(ROOT))
    return None


def imports(path: Path) -> set[str]:
    """The repository files `path` imports (at any depth of its code)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found |= {f for f in map(_module_file, targets) if f is not None}
    return found


FILES = sorted(str(p.relative_to(ROOT)) for folder in ("engine", "app", "bench") for p in (ROOT / folder).rglob("*.py"))


def test_every_layer_listed_exists():
    assert set().union(*MAY.values()) <= set(MAY), set().union(*MAY.values()) - set(MAY)


@pytest.mark.parametrize("name", FILES)
def test_each_import_keeps_to_the_table(name):
    layer = layer_of(name)
    assert layer is not None, f"{name}: in no layer of the table"
    broken = [f"{name} ({layer}) imports {target} ({layer_of(target)})" for target in sorted(imports(ROOT / name))
              if layer_of(target) not in MAY[layer] | {layer}]
    assert broken == []


def test_the_check_sees_imports_and_would_refuse_an_upward_one():
    assert "engine/state/__init__.py" in imports(ROOT / "engine" / "runtime" / "stages.py")
    assert layer_of("engine/session.py") not in MAY[layer_of("engine/runtime/stages.py")]
