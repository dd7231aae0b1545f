#!/bin/bash
# Prepared, not run: ab.py on the H200 (about 90 s). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16"
echo "rev $(cat build/REV)" > "$OUT/ab.log"
timeout 300 python3 docs/gpu/h16-one-slot/ab.py >> "$OUT/ab.log" 2>&1; echo "rc=$?" >> "$OUT/ab.log"
cat "$OUT/ab.log"
