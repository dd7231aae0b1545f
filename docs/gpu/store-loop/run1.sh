#!/bin/bash
# One device call: the seesaw with its partial stores as a loop (store-loop.patch)
# against main, 16-bit then fp8 cache (scripts/ab_seesaw.py). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev1.txt"
timeout 240 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x128x4096,128x128x16384 \
  main loop=docs/gpu/store-loop/store-loop.patch > "$OUT/ab-store-loop.log" 2>&1
echo "rc=$?" >> "$OUT/ab-store-loop.log"
timeout 150 python scripts/ab_seesaw.py --cache fp8 --shapes 64x64x4096,16x128x4096 \
  main loop=docs/gpu/store-loop/store-loop.patch > "$OUT/ab-store-loop-fp8.log" 2>&1
echo "rc=$?" >> "$OUT/ab-store-loop-fp8.log"
