#!/usr/bin/env bash
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts"
echo "rev $(cat build/REV)"; t0=$(date +%s)
(echo "rev $(cat build/REV)"; timeout 500 python3 build/ab_variants.py ${1:-} 2>&1) | tee $OUT/variants.log
echo "t $(( $(date +%s) - t0 )) s"
