#!/usr/bin/env bash
# Smoke test of a built, installed app (not of the source tree), with nothing from the caller's
# environment: no Python, no virtual environment, no PYTHONPATH, a fresh empty home folder.
#     bash packaging/smoke_test.sh dist/duplexcadence/duplexcadence     # the folder bundle
#     bash packaging/smoke_test.sh /usr/bin/duplexcadence               # the installed .deb
# 1. `--version` answers; 2. the window opens offscreen, loads the demo model and exits with
# status 0 on SIGTERM, with the echo-cancellation library loaded; 3. `offline --model demo` turns the bundled speech sample into a WAV of
# the same length (mono, 24 kHz, 16-bit); 4. no import, plugin or traceback lines in the output
# or the log; 5. prints the installation's size. Needs only bash and coreutils.
set -euo pipefail
app=$(realpath "${1:?usage: smoke_test.sh PATH_TO_THE_APP_EXECUTABLE}")
install_dir=$(dirname "$app")
sample="$install_dir/_internal/assets/speech_sample.wav"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The app with a bare environment (an array, not a function: `$!` must be the app's own PID).
run=(env -i HOME="$work/home" PATH=/usr/bin:/bin LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen "$app")
fail() { echo "SMOKE TEST FAILED: $*" >&2; exit 1; }
mkdir -p "$work/home"

echo "== version"
"${run[@]}" --version | tee "$work/version.txt"
grep -q "^DuplexCadence [0-9]" "$work/version.txt" || fail "--version printed no version"

echo "== window: open, load the demo model, exit on request"
"${run[@]}" --model demo >"$work/gui.out" 2>&1 &
pid=$!
log="$work/home/.local/share/DuplexCadence/DuplexCadence/logs/duplexcadence.log"
for _ in $(seq 1 240); do
    grep -q -e "loaded demo on" -e " ERROR " "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
grep -q "loaded demo on" "$log" 2>/dev/null || {
    cat "$work/gui.out" "$log" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; fail "the demo model did not load"; }
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[ "$status" = 0 ] || { cat "$work/gui.out" "$log" || true; fail "the app exited with status $status on SIGTERM"; }
grep -q "exiting (status 0)" "$log" || fail "the log does not show a clean exit"
grep "loaded demo on" "$log"
grep -q "echo cancellation: available" "$log" || fail "the bundle cannot load the echo-cancellation library"

echo "== offline --model demo on the bundled speech sample"
"${run[@]}" offline --model demo --input "$sample" --output "$work/reply.wav" 2>&1 | tee "$work/offline.out"
# The header: RIFF....WAVE, PCM format 1, 1 channel, 24000 Hz, 16 bits; and as many samples as the input.
header() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }
header16() { od -An -tu2 -j "$2" -N2 "$1" | tr -d ' '; }
[ "$(head -c4 "$work/reply.wav")" = RIFF ] && [ "$(tail -c+9 "$work/reply.wav" | head -c4)" = WAVE ] \
    || fail "reply.wav is not a RIFF/WAVE file"
[ "$(header16 "$work/reply.wav" 20)/$(header16 "$work/reply.wav" 22)/$(header "$work/reply.wav" 24)/$(header16 "$work/reply.wav" 34)" = "1/1/24000/16" ] \
    || fail "reply.wav is not mono 24 kHz 16-bit PCM"
# The bundled sample is itself mono 24 kHz 16-bit, so the reply, as long as the input, is as
# large as it within a header's difference.
in_bytes=$(stat -c %s "$sample"); out_bytes=$(stat -c %s "$work/reply.wav")
[ $(( out_bytes > in_bytes ? out_bytes - in_bytes : in_bytes - out_bytes )) -lt 1024 ] \
    || fail "reply.wav has $out_bytes bytes, the input $in_bytes: not the same length"
echo "reply.wav: $out_bytes bytes, input $in_bytes bytes"

echo "== no import, plugin or traceback errors"
if grep -E -i "Traceback|ModuleNotFoundError|ImportError|could not load the Qt platform plugin|qt.qpa.plugin: |cannot open shared object|Failed to execute script" \
        "$work/gui.out" "$work/offline.out" "$log"; then
    fail "errors above"
fi

echo "== size"
du -sh "$(realpath "$install_dir")"
echo "SMOKE TEST PASSED"
