#!/bin/bash
# One device call: stamps of the cp-first variant (../store-loop/store-loop.patch,
# cp-first.patch, stamps-cp-first.patch) and of main, each a timeline per slot,
# at the shapes where cp-first lost; then the descriptors made first (desc-first.patch)
# against main. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev3.txt"
t0=$(date +%s)
S="64x64x1024 16x64x4096 16x64x1024"
timeout 100 python docs/gpu/seesaw-start/stamps.py --patches \
  docs/gpu/store-loop/store-loop.patch+docs/gpu/seesaw-start/cp-first.patch+docs/gpu/seesaw-start/stamps-cp-first.patch \
  $S > "$OUT/stamps-cp-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/stamps-cp-first.log"
timeout 80 python docs/gpu/seesaw-start/stamps.py --patches docs/gpu/seesaw-start/stamps.patch \
  $S > "$OUT/stamps-main-timeline.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/stamps-main-timeline.log"
PYTHONPATH="$PWD:$PWD/scripts" timeout 80 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024 \
  main first=docs/gpu/seesaw-start/desc-first.patch > "$OUT/ab-desc-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-desc-first.log"
