"""What the installers carry beyond the code PyInstaller finds by itself, as data: read by
packaging/duplexcadence.spec and checked by tests/test_packaging_recipes.py."""
from __future__ import annotations

from fnmatch import fnmatch

# (source, relative to the repository root; folder inside the bundle). The bundle keeps the
# checkout's layout (assets/ beside app/ and engine/), so engine/files/paths.py and
# app/project_info.py find these files the same way in both.
BUNDLE_DATA = [
    ("assets/demo_model", "assets/demo_model"),  # the demo model, its DiffuPlex adapter and voices
    ("assets/speech_sample.wav", "assets"),
    ("assets/icon.png", "assets"),
    ("pyproject.toml", "."),
]

# Modules that hooks or imports would pull in but the app never uses. bench/ (the benchmarks,
# `python3 -m bench`) runs from a checkout only, as the wheel leaves it out.
EXCLUDED_MODULES = [
    "bench",
    "tkinter", "IPython", "matplotlib", "pandas", "scipy", "PIL", "pytest",
    "tensorboard", "torch.utils.tensorboard",
    # Qt modules beyond Core, Gui and Widgets (the app imports no others).
    "PyQt6.QtNetwork", "PyQt6.QtQml", "PyQt6.QtQuick", "PyQt6.QtWebEngineCore", "PyQt6.QtMultimedia",
    "PyQt6.QtPdf", "PyQt6.QtSql", "PyQt6.QtTest", "PyQt6.QtBluetooth", "PyQt6.QtPositioning",
]

# Files (by their path inside the bundle) that hooks collect but nothing loads: torch's C++
# test binaries and tools (torch_shm_manager stays: `import torch` looks for it), headers and
# static libraries, CMake files; Qt's translations (the app's text is English only) and the
# plugins for embedded displays, remote desktops and image formats the app never shows. Qt keeps
# its desktop platforms (xcb, wayland), offscreen (headless runs and tests), input methods
# and themes.
DROPPED_FILES = [
    "torch/test/*", "torch/include/*", "torch/share/*", "*.a", "*.lib",
    "torch/bin/*Test", "torch/bin/protoc*", "torch/bin/test_*", "torch/bin/*.ptl",
    "PyQt6/Qt6/translations/*",
    "PyQt6/Qt6/plugins/platforms/libq[elmv]*", "PyQt6/Qt6/plugins/egldeviceintegrations/*",
    "PyQt6/Qt6/plugins/generic/*", "PyQt6/Qt6/plugins/imageformats/*",
    # Qt's GTK theme needs GTK, which is not bundled; without it Qt draws its own style.
    "PyQt6/Qt6/plugins/platformthemes/libqgtk3.so",
    # ALSA and JACK come from the system, next to their configuration, plugins and servers;
    # the bundled PortAudio loads them (copies of them crash PortAudio on a system whose ALSA
    # configuration they do not match). They are dependencies of the .deb instead.
    "libasound.so.*", "libjack.so.*",
]


def keep_file(dest: str) -> bool:
    dest = dest.replace("\\", "/")
    return not any(fnmatch(dest, pattern) for pattern in DROPPED_FILES)
