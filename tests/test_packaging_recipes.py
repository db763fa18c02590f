"""The installer recipes name files and entry points that exist, agree with each other and
with pyproject.toml. Windows and macOS installers cannot be built on Linux: this is what can
be checked of them here. The Linux bundle itself is built and smoke-tested by
packaging/build_linux.sh (run by the test command)."""
from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.project_info import project_info, tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
sys.path.insert(0, str(PACKAGING / "pyinstaller"))
from bundle_contents import BUNDLE_DATA, keep_file  # noqa: E402

SPEC = (PACKAGING / "duplexcadence.spec").read_text()
INFO = project_info()


def test_identity_comes_from_pyproject():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert (INFO.name, INFO.version) == (data["project"]["name"], data["project"]["version"])
    assert INFO.icon.is_file() and INFO.icon.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert INFO.artifact("linux", "amd64", "deb") == f"{INFO.name}-{INFO.version}-linux-amd64.deb"


def test_spec_entry_point_and_files_exist():
    compile(SPEC, "duplexcadence.spec", "exec")
    entry = re.search(r'ROOT / "app" / "(\w+\.py)"', SPEC)[1]
    assert (ROOT / "app" / entry).is_file()
    for hook in re.findall(r'HOOKS / "(\w+\.py)"', SPEC):
        assert (PACKAGING / "pyinstaller" / hook).is_file(), hook
    assert (PACKAGING / "macos" / "entitlements.plist").is_file()
    for source, _ in BUNDLE_DATA:
        assert (ROOT / source).exists(), source
    # The bundle keeps the checkout's layout, so the engine finds the demo model in both.
    from engine.files.paths import DEMO_MODEL_DIR, SPEECH_SAMPLE
    bundled = {dest + "/" + Path(src).name if dest != Path(src).as_posix() else dest for src, dest in BUNDLE_DATA}
    for path in (DEMO_MODEL_DIR, SPEECH_SAMPLE, INFO.icon):
        assert path.relative_to(ROOT).as_posix() in bundled
    assert (DEMO_MODEL_DIR / "diffuplex.safetensors").is_file()  # the demo adapter rides along


def test_console_script_resolves():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, func = data["project"]["scripts"][INFO.name].split(":")
    assert callable(getattr(importlib.import_module(module), func))
    assert "from app.cli.commands import main" in (ROOT / "app" / "__main__.py").read_text()


def test_windows_recipe_names_the_bundle_the_spec_builds():
    iss = (PACKAGING / "windows" / "duplexcadence.iss").read_text()
    assert r'Source: "..\..\dist\{#AppName}\*"' in iss           # COLLECT(name=INFO.name)
    assert r'Filename: "{app}\{#AppName}.exe"' in iss            # EXE(name=INFO.name)
    assert "name=INFO.name" in SPEC
    script = (PACKAGING / "build_windows.ps1").read_text()
    for path in re.findall(r"packaging\\[\w\\.]+", script):
        assert (ROOT / path.replace("\\", "/")).is_file(), path
    for define in ("AppName", "AppDisplayName", "AppVersion", "AppId", "OutputName"):
        assert f"/D{define}=" in script and "{#" + define + "}" in iss
    assert not re.search(r"\d+\.\d+\.\d+", iss.split("[Setup]")[1])  # no version written by hand


def test_macos_recipe_has_the_microphone_entries():
    plist = (PACKAGING / "macos" / "entitlements.plist").read_text()
    assert "<key>com.apple.security.device.audio-input</key>\n    <true/>" in plist
    assert '"NSMicrophoneUsageDescription"' in SPEC and 'name=f"{INFO.display_name}.app"' in SPEC
    script = (PACKAGING / "build_macos.sh").read_text()
    assert 'app="dist/$display.app"' in script and "hdiutil create" in script
    assert "i.artifact('macos'" in script  # the .dmg is named as every installer is
    for path in re.findall(r"packaging/[\w/.]+", script):
        assert (ROOT / path).is_file(), path


def test_linux_build_script_names_existing_files():
    script = (PACKAGING / "build_linux.sh").read_text()
    for path in re.findall(r"packaging/[\w/.]+\.(?:py|sh|spec)", script):
        assert (ROOT / path).is_file(), path
    # The smoke test runs the executable the spec builds (dist/NAME/NAME), not its folder.
    assert f"packaging/smoke_test.sh dist/{INFO.name}/{INFO.name}" in script


def test_unused_files_are_dropped_and_needed_ones_kept():
    for dest in ("torch/bin/torch_shm_manager", "torch/lib/libtorch_cpu.so", "PyQt6/Qt6/plugins/platforms/libqxcb.so",
                 "PyQt6/Qt6/plugins/platforms/libqwayland.so", "PyQt6/Qt6/plugins/platforms/libqoffscreen.so"):
        assert keep_file(dest), dest
    for dest in ("torch/test/Dict_test", "torch/include/ATen/ATen.h", "torch/bin/protoc",
                 "PyQt6/Qt6/plugins/platforms/libqvnc.so", "PyQt6/Qt6/translations/qt_de.qm"):
        assert not keep_file(dest), dest


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian/Ubuntu)")
def test_make_deb_lays_out_a_desktop_package(tmp_path):
    """A real .deb from a stand-in bundle (one executable): the layout, control fields,
    desktop entry and icon, as dpkg reads them."""
    sys.path.insert(0, str(PACKAGING))
    import make_deb

    bundle = tmp_path / INFO.name
    bundle.mkdir()
    (bundle / INFO.name).write_text("#!/bin/sh\n")
    (bundle / INFO.name).chmod(0o755)
    deb = make_deb.build(bundle, tmp_path / "out", work=tmp_path / "stage")
    assert deb.name == INFO.artifact("linux", deb.name.rsplit("-", 1)[1].removesuffix(".deb"), "deb")
    fields = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    assert f"Package: {INFO.name}\n" in fields and f"Version: {INFO.version}\n" in fields
    assert "libportaudio2" not in fields and "libxkbcommon-x11-0" in fields and "libasound2" in fields
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert f"./usr/bin/{INFO.name} -> /opt/{INFO.name}/{INFO.name}" in listing
    assert f"./usr/share/icons/hicolor/256x256/apps/{INFO.name}.png" in listing
    entry = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert f"Exec=/usr/bin/{INFO.name}".encode() in entry and f"Icon={INFO.name}\n".encode() in entry


def test_the_cuda_release_is_read_from_pins_or_the_wheel_label():
    sys.path.insert(0, str(PACKAGING))
    from resolve_cuda_torch import cuda_release

    def torch_item(*requires):
        return [{"metadata": {"name": "torch", "version": "2.13.0", "requires_dist": list(requires)}}]

    # PyPI's Linux wheels pin the toolkit (2.13) or the runtime wheel (earlier releases).
    pinned = 'cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"'
    assert cuda_release(torch_item(pinned), "") == "13.0"
    assert cuda_release(torch_item("nvidia-cuda-runtime-cu12==12.8.90"), "") == "12.8"
    # PyTorch's index (Windows) carries the libraries inside the wheel: its label says which.
    assert cuda_release(torch_item("filelock"), "cu130") == "13.0"
    assert cuda_release(torch_item("filelock"), "cu126") == "12.6"
    with pytest.raises(SystemExit, match="not a CUDA build"):
        cuda_release(torch_item("filelock"), "")
