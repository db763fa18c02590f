"""The limits that keep the project readable to a newcomer, held by CI rather than by memory:
few loose modules at engine/'s top level, small app/ folders, short documents with short lines,
short module docstrings, and dated measurements only in the benchmark log."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_ROOMS = ("engine", "app", "bench", "packaging", "tests")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def python_files():
    for room in CODE_ROOMS:
        yield from (p for p in sorted((ROOT / room).rglob("*.py")) if "__pycache__" not in p.parts)


def test_engine_has_few_loose_modules():
    loose = [p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= 8, loose


def test_no_app_folder_is_crowded():
    for folder in [ROOT / "app", *(p for p in (ROOT / "app").rglob("*") if p.is_dir())]:
        modules = list(folder.glob("*.py"))
        assert len(modules) <= 20, (folder, len(modules))


def test_documents_are_short_with_short_lines():
    limits = {"README.md": 300, "docs/architecture.md": 350}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = doc.relative_to(ROOT).as_posix()
        lines = doc.read_text().splitlines()
        if name != "docs/benchmarks.md":  # the log grows with every run
            assert len(lines) <= limits.get(name, 300), (name, len(lines))
        long = [n for n, line in enumerate(lines, 1) if len(line) > 120]
        assert not long, (name, long)


def test_module_docstrings_are_a_few_lines():
    long = {}
    for path in python_files():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if doc and len(doc.strip().splitlines()) > 12:
            long[path.relative_to(ROOT).as_posix()] = len(doc.strip().splitlines())
    assert not long


def test_dated_figures_live_in_the_benchmark_log():
    dated = [f"{doc.name}:{n}" for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
             if doc.name != "benchmarks.md"
             for n, line in enumerate(doc.read_text().splitlines(), 1) if DATE.search(line)]
    dated += [f"{path.relative_to(ROOT)}:{n}" for path in python_files() if path.relative_to(ROOT).parts[0] != "tests"
              for n, line in enumerate(path.read_text().splitlines(), 1) if DATE.search(line)]
    assert not dated
