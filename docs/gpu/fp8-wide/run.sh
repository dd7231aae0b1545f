#!/bin/bash
# ab.py on the H200 (about 4 minutes); the log to $OUT.
set -u
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/fp8-wide"
echo "rev $rev" > "$OUT/ab.log"
timeout ${AB_TIMEOUT:-400} python3 docs/gpu/fp8-wide/ab_wide.py >> "$OUT/ab.log" 2>&1
echo "rc=$?" >> "$OUT/ab.log"
cat "$OUT/ab.log"
