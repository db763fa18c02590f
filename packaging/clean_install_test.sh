#!/usr/bin/env bash
# Installs the built .deb as a new user would, on a clean Debian with no Python at all (a minimal
# bookworm made by debootstrap, entered with chroot), then runs the smoke test there against the
# command its desktop entry starts, and checks the entry's icon. Needs root and Debian's mirror.
#     sudo bash packaging/clean_install_test.sh dist/duplexcadence-VERSION-linux-amd64.deb
set -euo pipefail
deb=$(realpath "${1:?usage: clean_install_test.sh PATH_TO_THE_DEB}")
cd "$(dirname "$0")/.."
source packaging/system_packages.sh
# A new system every run: an app installed by an earlier run must not stand in for this one.
mkdir -p build
root=$(mktemp -d "$PWD/build/clean-root.XXXXXX")
cleanup() {
    for fs in dev sys proc; do umount "$root/$fs" 2>/dev/null || true; done
    # Never delete through a mount that is still there.
    for fs in dev sys proc; do mountpoint -q "$root/$fs" && return; done
    rm -rf "$root"
}
trap cleanup EXIT
command -v debootstrap >/dev/null || install_debian_packages debootstrap
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
! chroot "$root" sh -c 'command -v python3' || { echo "$root has a Python: not a clean system" >&2; exit 1; }
for fs in proc sys dev; do mount --bind "/$fs" "$root/$fs"; done
cp "$deb" "$root/tmp/"
cp packaging/smoke_test.sh "$root/tmp/"
chroot "$root" apt-get update -qq
# apt resolves the package's dependencies from the mirror, as `apt install ./file.deb` does for a user.
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$deb")"
entry=$(ls "$root"/usr/share/applications/*.desktop)
icon=$(sed -n 's/^Icon=//p' "$entry")
[ -f "$root/usr/share/icons/hicolor/256x256/apps/$icon.png" ] || { echo "the desktop entry's icon $icon is not installed" >&2; exit 1; }
! chroot "$root" sh -c 'command -v python3' || { echo "installing the app brought in a Python" >&2; exit 1; }
# What the desktop entry starts (its Exec line) is what the smoke test runs.
exec_line=$(sed -n 's/^Exec=//p' "$entry")
echo "desktop entry $(basename "$entry"): Exec=$exec_line Icon=$icon"
chroot "$root" bash /tmp/smoke_test.sh "$exec_line"
