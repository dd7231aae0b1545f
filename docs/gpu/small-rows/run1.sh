#!/bin/bash
# read_floor.py, then ab_h32.py. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
echo "rev $(cat build/REV)" | tee "$OUT/rev"
t0=$SECONDS
timeout 150 python3 docs/gpu/small-rows/read_floor.py > "$OUT/read-floor.log" 2>&1; echo "rc=$? $((SECONDS-t0))s" >> "$OUT/read-floor.log"
t0=$SECONDS
timeout 200 python3 docs/gpu/small-rows/ab_h32.py > "$OUT/ab-h32.log" 2>&1; echo "rc=$? $((SECONDS-t0))s" >> "$OUT/ab-h32.log"
tail -n 30 "$OUT"/*.log
