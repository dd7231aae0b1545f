#!/bin/bash
# One device call: the seesaw with blocks asked into L2 ahead of its ring (2 or 4
# blocks) against main, both stages under CUDA graphs (scripts/ab_seesaw.py). Logs to
# $OUT; run from the repository root on a tree at main.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/l2-prefetch
git rev-parse --short HEAD > "$OUT/rev.txt" 2>/dev/null; git status --short >> "$OUT/rev.txt"
t0=$(date +%s)
timeout 560 python scripts/ab_seesaw.py --rep 40 \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,4x128x4096,1x128x4096,64x32x1024,128x128x16384,128x64x16384 \
  main ahead2=$D/l2-ahead-2.patch ahead4=$D/l2-ahead-4.patch > "$OUT/ab-l2-prefetch.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-l2-prefetch.log"
