#!/bin/bash
# The fp8-MMA kernel with s-ahead.patch applied (the next block's S issued before this
# block's softmax): its checks and timing, and its GPU tests. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
timeout 260 python scripts/fp8_mma_check.py > "$OUT/fp8-mma-check-s-ahead.log" 2>&1
echo "rc=$?" >> "$OUT/fp8-mma-check-s-ahead.log"
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k fp8_mma > "$OUT/gpu-tests-fp8-mma-s-ahead.log" 2>&1
echo "rc=$?" >> "$OUT/gpu-tests-fp8-mma-s-ahead.log"
