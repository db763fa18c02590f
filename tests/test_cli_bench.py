"""The benchmarks are their own entry point, `python3 -m bench`, run from a checkout: a clean
error line where there is no CUDA device, and the app's command line no longer has them. The
installed wheel and the PyInstaller bundle leave bench/ out."""
import importlib
import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

from app import cli
from app.project_info import tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_the_bench_is_its_own_command_and_says_what_it_needs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-m", "bench", "--tail", "step-audio2", "--output",
                             str(tmp_path / "out.json")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "Traceback" not in result.stderr
    assert "needs a CUDA GPU" in result.stderr and result.returncode == 1
    assert not (tmp_path / "out.json").exists()


def test_the_apps_command_line_has_no_bench(capsys):
    try:
        cli.main(["bench"])
    except SystemExit as exc:  # argparse: an unknown command
        assert exc.code == 2
    assert "invalid choice: 'bench'" in capsys.readouterr().err
    assert "sys.path" not in (ROOT / "app" / "cli" / "commands.py").read_text()


def test_the_wheel_and_the_bundle_leave_bench_out():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch(name, pattern) for name in ("bench", "bench.run") for pattern in include)
    assert any(fnmatch("engine.runtime", pattern) for pattern in include)
    assert not (ROOT / "engine" / "bench").exists()
    sys.path.insert(0, str(ROOT / "packaging" / "pyinstaller"))
    from bundle_contents import EXCLUDED_MODULES  # hooks would pull it in otherwise
    assert "bench" in EXCLUDED_MODULES


GPU_ONLY = {"triton", "moshi", "bitsandbytes"}  # present on the GPU machine, not in CI


def test_every_bench_module_imports():
    """A moved module must not leave a benchmark importing its old path (found only on the GPU)."""
    failures = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        try:
            importlib.import_module(f"bench.{path.stem}")
        except ModuleNotFoundError as exc:
            if exc.name.split(".")[0] not in GPU_ONLY:
                failures.append(f"{path.name}: {exc}")
        except ImportError as exc:
            failures.append(f"{path.name}: {exc}")
    assert not failures
