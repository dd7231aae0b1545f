#!/bin/bash
# Ran on the H200 on e548b62 (2026-12-04; logs/, README.md): ab.py, then ab_fp8.py. Logs to $OUT.
set -u
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16"
for name in ab ab_fp8; do
  echo "rev $rev" > "$OUT/$name.log"
  timeout 250 python3 docs/gpu/h16-one-slot/$name.py >> "$OUT/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/$name.log"
done
cat "$OUT"/*.log
