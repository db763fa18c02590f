#!/usr/bin/env bash
# MiniCPM-o 4.5 live on the GPU machine (bench.minicpmo_live): the app's engine thread and PortAudio on
# the private PulseAudio server, full-size random weights, LIVE_SECONDS one-second units of the
# LIVE_PHASE (talk, 240 units; or barge-in) in one call. That
# machine has no sound stack and no network: it travels in .audio (packaging/gpu_audio.sh), the other
# wheels in .whl (packaging/gpu_wheels.sh), the reference whose code writes the weights in out/ref.
#   OUT=... [LIVE_PHASE=talk] [LIVE_SECONDS=240] [LIVE_AGAINST=bench.json] bash packaging/gpu_live.sh
# Of .audio's libraries only those the machine lacks are added to its library path (its own stay in
# use), and to ldconfig's cache, where ctypes' find_library (sounddevice's) looks for PortAudio.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_live}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl .audio/wheels/*.whl
lib=/tmp/duplexcadence-audio-lib
rm -rf "$lib" && mkdir -p "$lib"
for path in .audio/lib/*.so*; do
    name=$(basename "$path")
    # (the machine's own: an earlier call's entries for $lib, emptied above, do not count)
    ldconfig -p | grep "^[[:space:]]*$name " | grep -qv "=> $lib/" || cp -P "$path" "$lib/$name"
done
echo "libraries added: $(ls "$lib" | tr '\n' ' ')"
if echo "$lib" > /etc/ld.so.conf.d/zz-duplexcadence-audio.conf 2>/dev/null && ldconfig; then
    :
else  # no cache to add to: the loader's path, and find_library through a link step
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LIBRARY_PATH="$lib"
fi
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
# Without its configuration ALSA lists no devices and PortAudio's ALSA host asserts (aborts) on import.
alsa="$PWD/.audio/share/alsa"
[ -e /usr/share/alsa/alsa.conf ] || export ALSA_CONFIG_DIR="$alsa" ALSA_CONFIG_PATH="$alsa/alsa.conf"
"$PYTHON" -c "import sounddevice; print('PortAudio:', sounddevice._libname, sounddevice.get_portaudio_version()[1])"
"$PYTHON" -m bench.virtual_audio .audio  # the sound stack works, in seconds, before minutes of weights
phase=${LIVE_PHASE:-talk}
against=()
[ -z "${LIVE_AGAINST:-}" ] || against=(--against "$LIVE_AGAINST")
"$PYTHON" -m bench.minicpmo_live --reference "${MINICPMO_REFERENCE:-out/ref}" --audio-bundle .audio --scratch /tmp \
    --phase "$phase" --seconds "${LIVE_SECONDS:-240}" --output "$OUT/live_minicpmo_$phase.json" "${against[@]}" 2>&1 \
    | tee "$OUT/live_minicpmo_$phase.log" | grep --line-buffered -v -i warn
exit "${PIPESTATUS[0]}"
