#!/usr/bin/env bash
# Installs DuplexCadence from this checkout into a virtual environment (.venv in the checkout,
# or $DUPLEXCADENCE_VENV), with the Debian packages and the torch build this machine needs
# (packaging/system_packages.sh). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
source packaging/system_packages.sh
install_debian_packages "${RUNTIME_DEBIAN_PACKAGES[@]}"
ensure_venv
install_torch
# On a GPU, demand-sized state maps memory through the CUDA driver's bindings: the gpu extra.
extras=""; [ "$TORCH_BUILD" = cuda ] && extras="[gpu]"
"$PYTHON" -m pip install -q -e ".$extras"
# The command on the user's PATH where the desktop's usual ~/.local/bin is on it.
mkdir -p "$HOME/.local/bin"
ln -sf "$VENV/bin/duplexcadence" "$HOME/.local/bin/duplexcadence"
echo "installed. Start the app with: $VENV/bin/duplexcadence  (also linked as ~/.local/bin/duplexcadence)"
