"""What pip offers of each echo-cancellation library compared in bench/echo_options.py: the
latest version, which wheels exist for Linux, Windows and macOS on Python 3.10-3.12 (`pip
download --only-binary=:all: --platform ...`; "not in the index queried" where none is found,
which says nothing of other indexes), when they were built (the zip timestamps of the wheel's
METADATA), and notes from installing and reading them."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = {"livekit": "livekit", "aec_audio_processing": "aec-audio-processing", "speexdsp": "speexdsp"}
WHEEL_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "win_amd64", "macosx_11_0_arm64")
WHEEL_PYTHONS = ("3.10", "3.11", "3.12")
NOTES = {
    "livekit": "The manylinux2014 (glibc 2.17) query resolves to livekit 0.2.3 (py3-none-any, 2023), which has no "
               "rtc.AudioProcessingModule nor native library: livekit 1.x wheels are manylinux_2_28 (glibc >= 2.28). "
               "Python-version independent (py3-none) wheels. high_pass_filter=False changes nothing while AEC3 "
               "runs (bit-identical output here): WebRTC enforces its high-pass filter with AEC3.",
    "aec_audio_processing": "Requires-Python >= 3.11 (no 3.10). Wheels only for Windows in the index queried; an "
                            "sdist (aec_audio_processing-1.0.1.tar.gz, 5.9 MB) is what Linux and macOS get, built "
                            "locally (the wheel used here was built from it: cp311-linux_x86_64). Its C++ wrapper "
                            "leaves the VAD flag uninitialised and exposes no high-pass filter switch (AEC3's "
                            "enforced one still runs: about -17 dB at 50 Hz here).",
    "speexdsp": "sdist only (speexdsp-0.1.1.tar.gz, 2018): needs SWIG, a C++ compiler and libspeexdsp headers "
                "(Debian: swig, libspeexdsp-dev) to install. Linear echo canceller only (the wrapper leaves Speex's "
                "residual-echo preprocessor commented out).",
    "speexdsp_ns": "speexdsp-ns 0.1.2 is Speex noise suppression only (no echo canceller): not benchmarked.",
    "pyspeexdsp": "Not in the index queried.",
}


def _pip(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def latest_version(package: str) -> str | None:
    result = _pip("index", "versions", package)
    for line in result.stdout.splitlines():
        if line.startswith(package) and "(" in line:
            return line.split("(")[1].rstrip(")")
    return None


def wheel_date(wheel: Path) -> str:
    """When the wheel was built: the zip timestamp of its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(".dist-info/METADATA"))
    year, month, day = info.date_time[:3]
    return f"{year:04d}-{month:02d}-{day:02d}"


def wheel_availability(package: str) -> dict:
    """Per platform tag and Python version: the wheel pip picks (name, build date), or None."""
    found: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        for plat in WHEEL_PLATFORMS:
            found[plat] = {}
            for python in WHEEL_PYTHONS:
                target = Path(folder) / plat / python
                try:
                    result = _pip("download", "--no-deps", "--only-binary=:all:", "--platform", plat,
                                  "--python-version", python, package, "-d", str(target))
                except subprocess.TimeoutExpired:
                    found[plat][python] = {"wheel": None, "why": "pip timed out"}
                    continue
                wheels = sorted(target.glob("*.whl")) if result.returncode == 0 else []
                found[plat][python] = ({"wheel": wheels[0].name, "built": wheel_date(wheels[0])} if wheels
                                       else {"wheel": None, "why": "not in the index queried"})
    return found


def packaging_facts() -> dict:
    facts = {}
    for module, package in PACKAGES.items():
        print(f"  asking pip about {package}", file=sys.stderr)
        facts[module] = {"package": package, "latest": latest_version(package), "wheels": wheel_availability(package),
                         "note": NOTES[module]}
    facts["speexdsp_ns"] = {"package": "speexdsp-ns", "note": NOTES["speexdsp_ns"]}
    facts["pyspeexdsp"] = {"package": "pyspeexdsp", "note": NOTES["pyspeexdsp"]}
    return facts


def wheel_summary(wheels: dict, latest: str | None) -> str:
    """Per platform: the Python versions with a wheel, and the package version where it is not the latest."""
    parts = []
    for plat, by_python in wheels.items():
        have = [py for py, w in by_python.items() if w["wheel"]]
        versions = sorted({w["wheel"].split("-")[1] for w in by_python.values() if w["wheel"]})
        older = f" (only {', '.join(versions)})" if versions and latest not in versions else ""
        parts.append(f"{plat}: {','.join(have) if have else 'none'}{older}")
    return "; ".join(parts)
