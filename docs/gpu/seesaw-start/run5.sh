#!/bin/bash
# One device call: stamps of the current seesaw (the page reads first), slot 4 now
# read under a predicate on the page indices so that it waits for them to land.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev5.txt"
timeout 150 python docs/gpu/seesaw-start/stamps.py --patches docs/gpu/seesaw-start/stamps-pages-first.patch \
  64x64x1024 16x64x4096 16x64x1024 16x32x1024 > "$OUT/stamps-pages-first.log" 2>&1
echo "rc=$?" >> "$OUT/stamps-pages-first.log"
