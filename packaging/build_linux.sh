#!/usr/bin/env bash
# Builds the Linux installer: a PyInstaller folder bundle (dist/duplexcadence/) and a .deb
# (dist/duplexcadence-VERSION-linux-ARCH.deb) that installs it under /opt with a desktop entry,
# an icon and the `duplexcadence` command. Then runs the smoke test on the built bundle.
#     bash packaging/build_linux.sh            # build, package, smoke-test
#     SKIP_SMOKE=1 bash packaging/build_linux.sh
# The build environment is its own virtual environment (build/venv), with the CPU build of torch
# (the GPU question: packaging/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source packaging/system_packages.sh
# PortAudio is copied into the bundle from the build machine (dpkg-deb, which makes the .deb,
# is part of every Debian system).
install_debian_packages "${RUNTIME_DEBIAN_PACKAGES[@]}"
VENV=$(realpath -m "${DUPLEXCADENCE_BUILD_VENV:-$PWD/build/venv}")
PYTHON="$VENV/bin/python"
ensure_venv
DUPLEXCADENCE_TORCH=cpu install_torch
"$PYTHON" -m pip install -q "pyinstaller>=6.10,<7" .
# Python's headers go into the bundle (Triton needs them for GPU support; the spec says why).
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || install_debian_packages python3-dev

# What GPU support the installed app may fetch: resolved now, against PyPI, for this torch.
"$PYTHON" packaging/resolve_cuda_torch.py build/cuda_torch.json

start=$(date +%s)
# (PyInstaller imports every torch module to analyse it; their deprecation notices are noise here.)
PYTHONWARNINGS=ignore::DeprecationWarning "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/duplexcadence.spec
echo "bundle built in $(( $(date +%s) - start )) s: dist/duplexcadence ($(du -sh dist/duplexcadence | cut -f1))"

"$PYTHON" packaging/make_deb.py dist/duplexcadence dist
[ -n "${SKIP_SMOKE:-}" ] || bash packaging/smoke_test.sh dist/duplexcadence/duplexcadence
