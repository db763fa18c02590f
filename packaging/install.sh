#!/usr/bin/env bash
# Installs DuplexCadence (editable, from this checkout) and what it needs to run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
source packaging/system_packages.sh
install_debian_packages "${RUNTIME_DEBIAN_PACKAGES[@]}"
install_torch
"$PYTHON" -m pip install -q -e .
