#!/bin/bash
# One device call: partials_ab.py on a bf16 cache at five shapes (the last, one split,
# writes no partials: an A/A control), then on an fp8 cache at two. Logs to $OUT.
# (A first call with seven and three shapes was cut when the machine was taken back.)
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/partials-16
cat build/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout 170 python $D/partials_ab.py \
  --shapes 16x64x4096,16x64x1024,16x32x1024,16x128x4096,128x128x4096 > "$OUT/ab-bf16.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-bf16.log"
timeout 90 python $D/partials_ab.py --cache fp8 --shapes 16x64x4096,16x128x4096 \
  > "$OUT/ab-fp8.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-fp8.log"
