#!/bin/bash
# One device call: the fp8 Gluon stage 1s' prologue (ab_fp8_prologue.py, against
# build/prev/_gluon_kernels.py), then their GPU tests while time is left. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev3.txt"
t0=$(date +%s)
timeout 130 python docs/gpu/stage2-early-loads/ab_fp8_prologue.py build/prev/_gluon_kernels.py > "$OUT/ab-fp8-prologue.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-fp8-prologue.log"
left=$(( 190 - ($(date +%s) - t0) ))
timeout $left python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "fp8 and gluon" > "$OUT/gpu-tests-fp8-gluon.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests-fp8-gluon.log"
