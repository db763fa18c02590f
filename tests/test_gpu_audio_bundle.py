"""packaging/gpu_audio.sh: the sound stack gathered for a machine without one carries every library it
loads but glibc's and the compiler's, and the private PulseAudio server runs from it, its microphone
reaching PortAudio (the same check packaging/gpu_live.sh runs first on the GPU machine)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.audio
ROOT = Path(__file__).resolve().parents[1]
SYSTEM = ("libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2",
          "libstdc++.so.6", "libgcc_s.so.1")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    dest = tmp_path_factory.mktemp("audio") / "bundle"
    subprocess.run(["bash", "packaging/gpu_audio.sh"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "DEST": str(dest), "WHEELS": "0"})
    return dest


def test_it_carries_every_library_it_loads_but_the_system_s(bundle, tmp_path):
    # The loader with no cache and no system folders: only the bundle and glibc's and GCC's libraries.
    system = tmp_path / "system"
    system.mkdir()
    folders = (Path("/lib/x86_64-linux-gnu"), Path("/usr/lib/x86_64-linux-gnu"))
    for name in SYSTEM:
        (system / name).symlink_to(next(f for f in folders if (f / name).exists()) / name)
    elves = [bundle / "bin" / "pulseaudio", bundle / "bin" / "pacat", bundle / "bin" / "pactl",
             *(bundle / "lib").glob("*.so*"), *(bundle / "lib" / "pulse-modules").glob("*.so"),
             *(bundle / "lib" / "alsa-lib").glob("*.so")]
    assert len(elves) > 20
    for elf in elves:
        listed = subprocess.run(["/lib64/ld-linux-x86-64.so.2", "--inhibit-cache", "--library-path",
                                 f"{bundle / 'lib'}:{system}", "--list", str(elf)], capture_output=True, text=True)
        resolved = [line.split("=>")[1].split()[0] for line in listed.stdout.splitlines() if "=>" in line]
        assert "not found" not in listed.stdout, (elf, listed.stdout)
        assert all(path.startswith((str(bundle), str(system))) for path in resolved), (elf, resolved)


def test_the_server_runs_from_it_and_the_microphone_hears(bundle):
    done = subprocess.run([sys.executable, "-m", "bench.virtual_audio", str(bundle)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "LD_LIBRARY_PATH": str(bundle / "lib")})
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "heard noise" in done.stdout
