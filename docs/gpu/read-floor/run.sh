#!/bin/bash
# One device call: the read floor of 64/16/4096's partitions beside our two stages.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
cat build/REV > "$OUT/rev.txt"
PYTHONPATH="$PWD:$PWD/scripts" timeout ${1:-200} python docs/gpu/read-floor/read_floor.py > "$OUT/read-floor.log" 2>&1
echo "rc=$?" >> "$OUT/read-floor.log"
