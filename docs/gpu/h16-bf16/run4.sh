#!/bin/bash
# ab_small.py, then the column-softmax patch's A/B (bf16 and fp8 caches). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
echo "rev $(cat build/REV)" | tee "$OUT/rev"
t0=$SECONDS
timeout 200 python3 docs/gpu/h16-bf16/ab_small.py > "$OUT/ab-small.log" 2>&1; echo "rc=$? $((SECONDS-t0))s" >> "$OUT/ab-small.log"
t0=$SECONDS
timeout 170 python3 scripts/ab_seesaw.py --shapes 64x16x4096,128x16x16384,16x16x4096 \
  main cs=docs/gpu/h16-bf16/column-softmax.patch > "$OUT/ab-cs-bf16.log" 2>&1; echo "rc=$? $((SECONDS-t0))s" >> "$OUT/ab-cs-bf16.log"
t0=$SECONDS
timeout 170 python3 scripts/ab_seesaw.py --cache fp8 --shapes 128x16x16384,64x16x4096,16x16x4096 \
  main cs=docs/gpu/h16-bf16/column-softmax.patch > "$OUT/ab-cs-fp8.log" 2>&1; echo "rc=$? $((SECONDS-t0))s" >> "$OUT/ab-cs-fp8.log"
tail -n 30 "$OUT"/*.log
