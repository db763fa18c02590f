#!/usr/bin/env bash
# Installs everything the tests need (Debian packages, and the Python packages into the same
# virtual environment as install.sh) and runs the linter, the test suite, and the build and
# smoke tests of the Linux installer (packaging/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source packaging/system_packages.sh
# The audio tests play through real PortAudio streams into a private PulseAudio null sink.
# espeak-ng speaks the user's part in the echo-cancellation loop test.
install_debian_packages "${RUNTIME_DEBIAN_PACKAGES[@]}" pulseaudio pulseaudio-utils libasound2-plugins espeak-ng
ensure_venv
install_torch
extras="test"; [ "$TORCH_BUILD" = cuda ] && extras="test,gpu"
"$PYTHON" -m pip install -q -e ".[$extras]"
# The reference runtimes, for parity tests only; --no-deps keeps their pinned torch out.
"$PYTHON" -m pip install -q --no-deps moshi==0.2.13
# The stock Step-Audio2 token2wav, for the token2wav parity tests (its other needs are in [test]).
"$PYTHON" -m pip install -q --no-deps minicpmo-utils==1.0.7

# The linter first: a style error fails the run before the long tests.
"$PYTHON" -m ruff check .

set +e
QT_QPA_PLATFORM=offscreen "$PYTHON" -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

# The Linux installer: built, smoke-tested as a bundle, then installed on a clean Debian made
# for the purpose (root only: it uses chroot). About 10 minutes on 2 cores; a quick local run
# can skip it with DUPLEXCADENCE_SKIP_INSTALLER=1.
if [ -n "${DUPLEXCADENCE_SKIP_INSTALLER:-}" ]; then
    echo "installer build skipped (DUPLEXCADENCE_SKIP_INSTALLER is set)"
    exit 0
fi
bash packaging/build_linux.sh
if [ "$(id -u)" = 0 ]; then
    bash packaging/clean_install_test.sh dist/duplexcadence-*-linux-*.deb
else
    echo "clean-system install test skipped: it needs root (sudo bash packaging/clean_install_test.sh dist/*.deb)"
fi
