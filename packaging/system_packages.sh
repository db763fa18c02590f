# Sourced by install.sh and test.sh: installs the Debian packages named in "$@" that are missing.
install_debian_packages() {
    command -v apt-get >/dev/null || { echo "no apt-get: install $* yourself" >&2; return 0; }
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    ((${#missing[@]})) || return 0
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# torch first, on its own: CPU machines here take the 2.13.0 CPU build from local disk, while
# an unpinned install would download a multi-GB CUDA build. An installed torch in our range stays.
install_torch() {
    "$PYTHON" - <<'PY' 2>/dev/null && return 0
import sys, torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (2, 11) <= (major, minor) < (2, 14) else 1)
PY
    "$PYTHON" -m pip install -q torch==2.13.0
}

# Runtime needs: PortAudio for sounddevice, the X/EGL libraries Qt's platform plugins load.
RUNTIME_DEBIAN_PACKAGES=(libportaudio2 libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libfontconfig1
    fonts-dejavu-core libdbus-1-3 libglib2.0-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0
    libxcb-xinerama0)
