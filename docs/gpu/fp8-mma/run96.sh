#!/bin/bash
# The Gluon and fp8-MMA GPU tests after tests/test_gpu.py's helpers were shared, and
# the sharded pass-through test on one GPU. Logs to $OUT; run from the repository root.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev96.txt"
timeout 420 python -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "fp8_mma or gluon_stage1_through_mla_decode" > "$OUT/gpu-tests-gluon-fp8-mma.log" 2>&1
echo "rc=$?" >> "$OUT/gpu-tests-gluon-fp8-mma.log"
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_sharded.py -k pass_through \
  > "$OUT/sharded-pass-through.log" 2>&1
echo "rc=$?" >> "$OUT/sharded-pass-through.log"
