#!/bin/bash
# Prepared, not run: ab.py, then ab_fp8.py, on the H200 (about 3 minutes). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16"
for name in ab ab_fp8; do
  echo "rev $(cat build/REV)" > "$OUT/$name.log"
  timeout 250 python3 docs/gpu/h16-one-slot/$name.py >> "$OUT/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/$name.log"
done
cat "$OUT"/*.log
