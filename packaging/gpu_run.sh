#!/usr/bin/env bash
# Everything that needs the GPU, in one run: the GPU test suite (runtime primitives and
# session bit-identity) and the benchmarks against the stock runtimes (and, for personaplex,
# DiffuPlex against our AR path; then Step-Audio2's token2wav). Results go to $OUT. GPU_CHECK=0 runs the benchmarks alone (the
# device tool allows 10 minutes a call: the suite in one, each shape's bench in its own). Output
# is printed line by line, so a call cut off at its limit still returns what ran.
# On the device machine (torch 2.11, no network) the missing wheels travel in .whl
# (packaging/gpu_wheels.sh fetches them):
#   python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:. OUT=... bash packaging/gpu_run.sh [moshiko personaplex minicpmo]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_run}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPU_CHECK_OUT="$OUT"
status=0
# tests/gpu: runtime primitives, fused kernels, session bit-identity on CUDA (one process each).
if [ "${GPU_CHECK:-1}" != 0 ]; then
    OUT="$OUT" bash packaging/gpu_check.sh >"$OUT/gpu_check.log" 2>&1 || status=1
    grep -E "passed|failed|error" "$OUT/gpu_check.log"
fi
for shape in "${@:-moshiko}"; do
    if [ "$shape" = minicpmo ]; then
        # MiniCPM-o 4.5 against OpenBMB's MiniCPM-o-Demo (its checkout at $MINICPMO_REFERENCE, carried:
        # the device has no network), 120 units each side, within one call's 10 minutes.
        "$PYTHON" -m bench.minicpmo --reference "${MINICPMO_REFERENCE:-out/ref}" --output "$OUT/bench_minicpmo.json" \
            --units "${MINICPMO_UNITS:-120}" --deadline-s "${MINICPMO_DEADLINE_S:-480}" --scratch /tmp 2>&1 \
            | tee "$OUT/bench_minicpmo.log" | grep --line-buffered -v -i warn
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        continue
    fi
    "$PYTHON" -m bench --model "$shape" --output "$OUT/bench_$shape.json" 2>&1 | tee "$OUT/bench_$shape.log" | grep --line-buffered -v -i warn
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    if [ "$shape" = personaplex ]; then
        "$PYTHON" -m bench --model personaplex --diffuplex --output "$OUT/bench_diffuplex_personaplex.json" \
            2>&1 | tee "$OUT/bench_diffuplex_personaplex.log" | grep --line-buffered -v -i warn
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    fi
done
# Step-Audio2's token2wav against the stock minicpmo-utils 1.0.7 (its wheel travels in .whl too).
if [ "${TAIL:-1}" != 0 ]; then
    "$PYTHON" -m bench --tail step-audio2 --output "$OUT/bench_token2wav.json" 2>&1 \
        | tee "$OUT/bench_token2wav.log" | grep --line-buffered -v -i warn
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
