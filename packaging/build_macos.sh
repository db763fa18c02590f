#!/usr/bin/env bash
# Builds the macOS app and disk image (run on a Mac from the repository root, with Python 3.11+):
#     bash packaging/build_macos.sh                      # ad-hoc signed, for this Mac
#     CODESIGN_IDENTITY="Developer ID Application: ..." bash packaging/build_macos.sh
# Output: dist/DuplexCadence.app and dist/duplexcadence-VERSION-macos-ARCH.dmg. There is no
# CUDA on macOS: the app runs on the CPU and offers no GPU download.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv build/venv
PYTHON=build/venv/bin/python
"$PYTHON" -m pip install -q "torch>=2.11,<2.14" "pyinstaller>=6.10,<7" pillow .
"$PYTHON" -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/duplexcadence.spec
# The names come from pyproject.toml, as every installer's do (app/project_info.py).
read -r display dmg_name < <("$PYTHON" -c "import platform; from app.project_info import project_info as p
i = p(); print(i.display_name, i.artifact('macos', platform.machine(), 'dmg'))")
app="dist/$display.app"
# The hardened runtime with the microphone entitlement: what notarization requires.
codesign --force --deep --options runtime --timestamp=none --sign "${CODESIGN_IDENTITY:--}" \
    --entitlements packaging/macos/entitlements.plist "$app"
dmg="dist/$dmg_name"
hdiutil create -volname "$display" -srcfolder "$app" -ov -format UDZO "$dmg"
echo "wrote $dmg"
