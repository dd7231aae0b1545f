#!/usr/bin/env bash
# main (4c32b82): warpgroup 1's P0 V0_R before its softmax (build/gk_reorder.py) against main's seesaw, both caches.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build"
rev=$(cat build/REV); echo "rev $rev"; t0=$(date +%s)
(echo "rev $rev"; timeout ${1:-250} python3 build/ab_reorder.py ${2:-} 2>&1) | tee $OUT/ab-reorder.log
echo "t $(( $(date +%s) - t0 )) s"
