#!/bin/bash
# One device call: the fp8-MMA GPU tests (run1.sh left them out) on the tl kernels'
# loads before the length. Logs to $OUT; run from the repository root.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev2.txt"
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k fp8_mma > "$OUT/gpu-tests-fp8-mma.log" 2>&1
echo "rc=$?" >> "$OUT/gpu-tests-fp8-mma.log"
