"""`duplexcadence bench` runs bench/ from a checkout: found beside app/ from an editable install,
one clean error line where there is none (an installed wheel, the PyInstaller bundle), and
neither of those carries it."""
import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from app import cli
from app.project_info import tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_without_a_checkout_bench_is_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "BENCH_ROOT", tmp_path)  # app/ with no bench/ beside it
    for argv in (["bench"], ["bench", "--diffuplex", "--model", "personaplex"], ["bench", "--tail", "step-audio2"]):
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == ("duplexcadence: error: benchmarks run from a checkout of the repository (bench/ is not "
                       "part of the installed app)\n")


def test_an_editable_install_finds_the_checkouts_bench(tmp_path):
    """From another folder, `bench` is not importable by itself; the command finds it beside
    app/ (here it stops at once: no CUDA device is visible)."""
    assert cli.BENCH_ROOT == ROOT
    script = ("import importlib.util, sys\n"
              "print(importlib.util.find_spec('bench') is None)\n"
              "from app.cli import main\n"
              "sys.exit(main(['bench', '--tail', 'step-audio2', '--output', 'out.json']))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    if "No module named 'app'" in result.stderr:
        pytest.skip("the checkout is not installed (pip install -e .) in this Python")
    assert result.stdout == "True\n", result.stderr
    assert "Traceback" not in result.stderr
    assert "needs a CUDA GPU" in result.stderr and result.returncode == 1
    assert not (tmp_path / "out.json").exists()


def test_the_wheel_and_the_bundle_leave_bench_out():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch(name, pattern) for name in ("bench", "bench.run") for pattern in include)
    assert any(fnmatch("engine.runtime", pattern) for pattern in include)
    assert not (ROOT / "engine" / "bench").exists()
    sys.path.insert(0, str(ROOT / "packaging" / "pyinstaller"))
    from bundle_contents import EXCLUDED_MODULES  # PyInstaller would follow app/cli.py's imports
    assert "bench" in EXCLUDED_MODULES
