#!/usr/bin/env bash
# Runs the GPU checks of the runtime primitives (tests/gpu) and the ring-attention benchmark
# on a CUDA machine, writing logs and numbers under $OUT (default out/gpu_check).
# Needs torch with CUDA, triton and cuda-bindings; nothing is installed here.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPU_CHECK_OUT="$OUT"

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$PYTHON" -c "import sys, torch, triton; from cuda import bindings
print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__,
      'cuda-bindings', bindings.__version__)"
} 2>&1 | tee "$OUT/env.txt"

# One process per module: a CUDA fault is sticky and would fail every later test in its process.
# The kernel tests that run under Triton's interpreter on the CPU run on CUDA here.
tests=0
: >"$OUT/gpu_tests.log"
# MODULES picks some, BENCH=0 leaves the benchmark out (a device call has 10 minutes; the whole
# list took more than 7 on an H200).
MODULES=${MODULES:-"tests/gpu/test_*.py tests/test_int4.py tests/test_rows_linear.py tests/test_codebook_kernels.py
    tests/test_stream_conv_kernel.py tests/test_stream_convtr_kernel.py tests/test_stream_embeddings_kernel.py tests/test_delay_lines_kernel.py
    tests/test_fused_linear_kernel.py tests/test_ring_attention_kernel.py tests/test_grouped_attention_kernel.py
    tests/test_topk_sampling_kernel.py tests/test_host_rows_kernel.py
    tests/test_split_sums.py tests/test_kernels_compile.py"}
for module in $MODULES; do
    "$PYTHON" -m pytest "$module" -q -rA -p no:cacheprovider 2>&1 | tee -a "$OUT/gpu_tests.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || tests=1
done
bench=0
if [ "${BENCH:-1}" != 0 ]; then
    "$PYTHON" -m tests.gpu.bench_ring_attention "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
    bench=${PIPESTATUS[0]}
fi
echo "gpu tests exit $tests, benchmark exit $bench"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
