#!/usr/bin/env bash
# The sound stack the GPU machine lacks, for the live bench there (bench.minicpmo_live through
# packaging/gpu_live.sh): this machine's Debian PulseAudio server and tools, PortAudio, ALSA with its
# pulse plugin and configuration, and every library they load but glibc's and the compiler's (that
# machine has its own), into .audio/ (git-ignored, carried to the device). The packages are those
# packaging/system_packages.sh installs for the tests. Also the Python wheels of the audio path that
# .whl does not hold (sounddevice, pulsectl, livekit), for the device's Python 3.12.
#   bin/  pulseaudio pactl pacat (paplay and parecord are pacat under their names)
#   lib/  the libraries; lib/pulse-modules/ the server's modules; lib/alsa-lib/ the pulse plugin
#   share/alsa/  ALSA's configuration       wheels/  the wheels
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.audio}
PYTHON=${PYTHON:-python3}
PULSE_MODULES=$(dirname "$(dpkg -L pulseaudio | grep -m1 '/modules/module-null-sink.so$')")
ALSA_PLUGINS=/usr/lib/x86_64-linux-gnu/alsa-lib
rm -rf "$DEST"
mkdir -p "$DEST"/{bin,lib/pulse-modules,lib/alsa-lib,share,wheels}
cp /usr/bin/pulseaudio /usr/bin/pactl /usr/bin/pacat "$DEST/bin/"
ln -s pacat "$DEST/bin/paplay"
ln -s pacat "$DEST/bin/parecord"
for module in module-null-sink module-native-protocol-unix module-loopback; do
    cp "$PULSE_MODULES/$module.so" "$DEST/lib/pulse-modules/"
done
cp "$ALSA_PLUGINS"/libasound_module_{pcm,ctl}_pulse.so "$DEST/lib/alsa-lib/"
portaudio=$(readlink -f /usr/lib/x86_64-linux-gnu/libportaudio.so.2)
cp "$portaudio" "$DEST/lib/libportaudio.so.2"
ln -s libportaudio.so.2 "$DEST/lib/libportaudio.so"  # the name a link step (ctypes' find_library) looks for
# ALSA's configuration, without its use-case files (hardware profiles; none here).
cp -r /usr/share/alsa "$DEST/share/"
rm -rf "$DEST/share/alsa/ucm" "$DEST/share/alsa/ucm2"
# The libraries all of these load, less what any Linux with a C++ compiler has: glibc's and GCC's.
keep_out='^(ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
for elf in "$DEST"/bin/pulseaudio "$DEST"/bin/pactl "$DEST"/bin/pacat "$DEST"/lib/*.so.* \
        "$DEST"/lib/pulse-modules/*.so "$DEST"/lib/alsa-lib/*.so; do
    ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    name=$(basename "$lib")
    if ! [[ $name =~ $keep_out ]] && [ ! -e "$DEST/lib/$name" ]; then
        cp -L "$lib" "$DEST/lib/$name"
    fi
done
missing=$(for elf in "$DEST"/bin/pulseaudio "$DEST"/lib/pulse-modules/*.so "$DEST"/lib/alsa-lib/*.so; do
    LD_LIBRARY_PATH="$DEST/lib" ldd "$elf" | grep "not found" || true; done)
[ -z "$missing" ] || { echo "gpu_audio.sh: unresolved libraries: $missing" >&2; exit 1; }
if [ "${WHEELS:-1}" != 0 ]; then  # WHEELS=0: the system's files alone (the tests check them)
    platforms=()
    for tag in manylinux_2_17 manylinux2014 manylinux_2_27 manylinux_2_28; do platforms+=(--platform "${tag}_x86_64"); done
    for wheel in sounddevice pulsectl 'livekit>=1.2,<1.3'; do
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            "${platforms[@]}" --platform any -d "$DEST/wheels" "$wheel"
    done
fi
du -sh "$DEST"
