#!/bin/bash
# tests/test_gpu.py after the triton step and its kernel list became one helper
# (triton_step): the fp8-MMA tests and the one-split Gluon stage 1 cases. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev99.txt"
timeout 130 python -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "fp8_mma or (gluon_stage1_through and 128-128-1024)" > "$OUT/gpu-tests-triton-step.log" 2>&1
echo "rc=$?" >> "$OUT/gpu-tests-triton-step.log"
