"""Packs a built folder bundle into a .deb: the bundle under /opt/NAME, the command as
/usr/bin/NAME, a desktop entry and a hicolor icon. Name, version, summary and icon come from
pyproject.toml; the dependencies are debian_runtime_packages.txt less PortAudio (bundled).

    python packaging/make_deb.py dist/duplexcadence dist
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.project_info import ProjectInfo, project_info  # noqa: E402

BUNDLED = {"libportaudio2"}  # carried inside the bundle, so not a dependency
# What the bundled PortAudio loads from the system (bundle_contents.py says why); the t64 name
# is Ubuntu 24.04's and Debian 13's.
PORTAUDIO_BACKENDS = ["libasound2t64 | libasound2", "libjack-jackd2-0 | libjack0"]


def runtime_dependencies() -> list[str]:
    lines = (ROOT / "packaging" / "debian_runtime_packages.txt").read_text().splitlines()
    listed = [p for p in (line.strip() for line in lines) if p and not p.startswith("#") and p not in BUNDLED]
    return listed + PORTAUDIO_BACKENDS


def desktop_entry(info: ProjectInfo) -> str:
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        f"Name={info.display_name}",
        f"Comment={info.summary}",
        f"Exec=/usr/bin/{info.name}",
        f"Icon={info.name}",
        "Terminal=false",
        "Categories=AudioVideo;Audio;",
        "Keywords=speech;voice;conversation;Moshi;PersonaPlex;",
        # So that docks group the running window with this entry: on X11 Qt sets the window's
        # WM_CLASS class to the application name (run_app sets it to the display name); on
        # Wayland the app id (setDesktopFileName) names this entry's file.
        f"StartupWMClass={info.display_name}",
        "",
    ])


def control(info: ProjectInfo, arch: str, installed_kib: int) -> str:
    return "\n".join([
        f"Package: {info.name}",
        f"Version: {info.version}",
        f"Architecture: {arch}",
        f"Maintainer: {info.display_name} developers <noreply@{info.name}.invalid>",
        f"Installed-Size: {installed_kib}",
        f"Depends: {', '.join(runtime_dependencies())}",
        # GPU support (fetched by the app) runs Triton kernels, which need a C compiler once.
        "Recommends: gcc",
        "Section: sound",
        "Priority: optional",
        f"Description: {info.summary}",
        " A desktop app to talk live with full-duplex speech models. It carries a small demo",
        " model; Moshi and PersonaPlex checkpoints are loaded from the Hugging Face cache.",
        "",
    ])


def du_kib(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() or f.is_symlink()) // 1024


def build(bundle: Path, out_dir: Path, work: Path = ROOT / "build" / "deb") -> Path:
    """`work`: where the package tree is staged (emptied first)."""
    info = project_info()
    if not (bundle / info.name).is_file():
        raise SystemExit(f"{bundle}: no {info.name} executable in it; build the bundle first")
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    stage = work / info.name
    shutil.rmtree(stage, ignore_errors=True)
    target = stage / "opt" / info.name
    shutil.copytree(bundle, target, symlinks=True)
    (stage / "usr" / "bin").mkdir(parents=True)
    os.symlink(f"/opt/{info.name}/{info.name}", stage / "usr" / "bin" / info.name)
    applications = stage / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    (applications / f"{info.app_id}.desktop").write_text(desktop_entry(info))
    icons = stage / "usr" / "share" / "icons" / "hicolor" / "256x256" / "apps"
    icons.mkdir(parents=True)
    shutil.copy(info.icon, icons / f"{info.name}.png")
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN" / "control").write_text(control(info, arch, du_kib(stage)))
    out_dir.mkdir(parents=True, exist_ok=True)
    deb = out_dir / info.artifact("linux", arch, "deb")
    # xz is what every dpkg reads; dpkg-deb compresses with all cores.
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "-z6", "--build", str(stage), str(deb)], check=True)
    print(f"wrote {deb} ({deb.stat().st_size / 2**20:.0f} MiB; installed {du_kib(stage) / 2**20:.2f} GiB)")
    return deb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, help="the folder PyInstaller built (dist/NAME)")
    parser.add_argument("out_dir", type=Path, help="where the .deb goes")
    args = parser.parse_args()
    build(args.bundle, args.out_dir)


if __name__ == "__main__":
    main()
