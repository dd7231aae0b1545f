#!/bin/bash
# One device call: partials_ab.py on a bf16 cache at seven shapes, then on an fp8
# cache at three. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/partials-16
cat build/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout 240 python $D/partials_ab.py > "$OUT/ab-bf16.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-bf16.log"
timeout 150 python $D/partials_ab.py --cache fp8 --shapes 16x64x4096,16x128x4096,128x128x4096 \
  > "$OUT/ab-fp8.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-fp8.log"
