#!/usr/bin/env bash
# The wheels the GPU machine lacks (it has torch, triton and no network), fetched here into .whl
# for packaging/gpu_run.sh: the stock runtimes the benchmarks and parity tests compare against
# (moshi 0.2.13 with bitsandbytes for its q8 layers; minicpmo-utils 1.0.7 for token2wav; for
# bench.minicpmo, the MiniCPM-o demo's stack: transformers 4.51.0 with the tokenizers and
# huggingface_hub it accepts, accelerate 1.12.0) and the audio libraries our package imports.
# tokenizers is pinned to 0.21.4, which transformers 4.51 requires and our tokenizer also runs on.
# bitsandbytes keeps only its CUDA 13.0 and CPU libraries, which brings it from about 60 MB to
# under 5 MB. There:
#   python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:. OUT=... bash packaging/gpu_run.sh [moshiko personaplex]
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
PYTHON=${PYTHON:-python3}
mkdir -p "$DEST"
platforms=()
for tag in manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34; do
    platforms+=(--platform "${tag}_x86_64")
done
for wheel in moshi==0.2.13 bitsandbytes==0.49.2 soundfile soxr cffi pycparser tokenizers==0.21.4 \
        transformers==4.51.0 huggingface_hub==0.36.2 accelerate==1.12.0 regex; do
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" --platform any -d "$DEST" "$wheel"
done
# Published as source only (pure Python): built into a wheel here.
"$PYTHON" -m pip wheel -q --no-deps -w "$DEST" minicpmo-utils==1.0.7
# A wheel is a zip: drop the other CUDA and ROCm builds of bitsandbytes' native library.
for bnb in "$DEST"/bitsandbytes-*.whl; do
    "$PYTHON" - "$bnb" <<'EOF'
import re, sys, zipfile
from pathlib import Path

path = Path(sys.argv[1])
keep = re.compile(r"libbitsandbytes_(cpu|cuda130)\.so$")
with zipfile.ZipFile(path) as whole:
    items = [(i, whole.read(i)) for i in whole.infolist()
             if "libbitsandbytes_" not in i.filename or keep.search(i.filename)]
partial = path.with_suffix(".partial")
with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as slim:
    for info, data in items:
        slim.writestr(info, data)
partial.replace(path)
EOF
done
du -sh "$DEST"
