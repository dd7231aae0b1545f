#!/bin/bash
# One device call: ab_cluster.py (the cluster merge against stage 2), first one shape
# under a short limit (a cluster barrier that never completes would hang), then the
# rest, then the seesaw's GPU tests while time is left. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev1.txt"
t0=$(date +%s)
timeout 120 python docs/gpu/cluster-merge/ab_cluster.py 64/64/1024 > "$OUT/ab-cluster-first.log" 2>&1
rc=$?
echo "rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cluster-first.log"
[ $rc -ne 0 ] && exit 0
timeout 330 python docs/gpu/cluster-merge/ab_cluster.py 16/64/4096 32/64/4096 16/128/4096 \
  16/64/1024 16/32/1024 32/128/4096 64/32/4096 64/64/4096 32/64/1024 16/64/16384 \
  > "$OUT/ab-cluster.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cluster.log"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left python -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon" > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests.log"
