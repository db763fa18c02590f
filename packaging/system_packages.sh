# Sourced by install.sh and test.sh: Debian packages, the virtual environment, torch.

# The virtual environment everything goes into: a system Python refuses pip installs (PEP 668).
VENV=$(realpath -m "${DUPLEXCADENCE_VENV:-$PWD/.venv}")
BASE_PYTHON=${PYTHON:-python3}
PYTHON="$VENV/bin/python"
PIP_RANGE="pip>=26,<27"

# Runtime needs, one per line in debian_runtime_packages.txt (the .deb's dependencies too).
mapfile -t RUNTIME_DEBIAN_PACKAGES < <(grep -v -e '^#' -e '^$' "$(dirname "${BASH_SOURCE[0]}")/debian_runtime_packages.txt")

# Installs the Debian packages named in "$@" that are missing.
install_debian_packages() {
    command -v apt-get >/dev/null || { echo "no apt-get: install $* yourself" >&2; return 0; }
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    ((${#missing[@]})) || return 0
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Creates the virtual environment (or reuses it). Debian and Ubuntu ship venv and pip for the
# system Python in a separate package.
ensure_venv() {
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then  # absent, or left half made
        "$BASE_PYTHON" -c "import ensurepip, venv" 2>/dev/null || install_debian_packages python3-venv
        echo "creating the virtual environment $VENV"
        "$BASE_PYTHON" -m venv --clear "$VENV"
    fi
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || { echo "$VENV: Python >= 3.10 is needed" >&2; return 1; }
    # The system's pip may be years old; the installer build resolves GPU support with a release
    # that reads wheels' metadata without downloading them (packaging/resolve_cuda_torch.py).
    "$PYTHON" -m pip install -q "$PIP_RANGE"
}

# torch, on its own and first: the CPU build (about 190 MB to download, 750 MB installed) where
# no NVIDIA GPU is present, the CUDA build (about 530 MB plus about 3 GB of NVIDIA libraries)
# where one is. DUPLEXCADENCE_TORCH=cpu or =cuda forces either. A torch already in the
# environment, in our range and of the wanted build, stays. Sets TORCH_BUILD (cpu or cuda).
# numpy comes in the same step: torch's wheels do not require it, yet importing torch without
# it (the build check below) prints "Failed to initialize NumPy: No module named 'numpy'".
TORCH_RANGE="torch>=2.11,<2.14"
TORCH_NUMPY="numpy>=1.24"  # pyproject.toml's range
CPU_INDEX=https://download.pytorch.org/whl/cpu
install_torch() {
    local build=${DUPLEXCADENCE_TORCH:-auto}
    if [ "$build" = auto ]; then
        build=cpu
        if nvidia-smi -L >/dev/null 2>&1; then build=cuda; fi
    fi
    TORCH_BUILD=$build
    WANT=$build "$PYTHON" - <<'PY' 2>/dev/null && return 0
import os, sys, torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
same_build = (torch.version.cuda is not None) == (os.environ["WANT"] == "cuda")
sys.exit(0 if (2, 11) <= (major, minor) < (2, 14) and same_build else 1)
PY
    case "$build" in
    cuda)
        echo "installing torch, CUDA build: about 530 MB plus about 3 GB of NVIDIA libraries"
        "$PYTHON" -m pip uninstall -q -y torch 2>/dev/null || true
        "$PYTHON" -m pip install -q "$TORCH_RANGE" "$TORCH_NUMPY" ;;
    cpu)
        echo "installing torch, CPU build: about 190 MB"
        "$PYTHON" -m pip uninstall -q -y torch 2>/dev/null || true
        if "$PYTHON" -c "import urllib.request; urllib.request.urlopen('$CPU_INDEX/torch/', timeout=10)" 2>/dev/null; then
            "$PYTHON" -m pip install -q "$TORCH_RANGE" "$TORCH_NUMPY" --index-url "$CPU_INDEX" --extra-index-url https://pypi.org/simple
        else
            # No route to PyTorch's index: a machine with its own package mirror (such as our
            # build machines, which hold the 2.13.0 CPU build).
            "$PYTHON" -m pip install -q torch==2.13.0 "$TORCH_NUMPY"
        fi
        "$PYTHON" -c "import sys, torch; sys.exit(torch.version.cuda is not None)" \
            || echo "warning: this machine's package index gave a CUDA build of torch; the CPU build is at $CPU_INDEX" >&2 ;;
    *)
        echo "DUPLEXCADENCE_TORCH=$build: use cpu or cuda" >&2
        return 1 ;;
    esac
}
