#!/bin/bash
# One device call: v3 (v2's pair merge as a loop of 8-head chunks that is not
# unrolled) against stage 2 with ab_cluster.py, first one shape under a short limit,
# then the Gluon GPU tests through mla_decode while time is left. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev7.txt"
t0=$(date +%s)
timeout 60 python docs/gpu/cluster-merge/ab_cluster.py 64/64/1024 > "$OUT/ab-loop-first.log" 2>&1
rc=$?
echo "rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/ab-loop-first.log"
[ $rc -ne 0 ] && exit 0
timeout 80 python docs/gpu/cluster-merge/ab_cluster.py 64/32/1024 32/128/1024 64/64/4096 \
  32/128/4096 > "$OUT/ab-loop.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-loop.log"
left=$(( 190 - ($(date +%s) - t0) ))
timeout $left python -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through and (64-64-1024 or 32-96-4096 or 64-32-4096)" > "$OUT/gpu-tests-loop.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests-loop.log"
