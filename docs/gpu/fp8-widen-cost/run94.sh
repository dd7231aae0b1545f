#!/usr/bin/env bash
# What each warpgroup's widening costs the fp8 seesaw now: stage 1 with warpgroup 1's,
# warpgroup 0's, or both widenings skipped (wrong values: the timing of a free
# widening; the error against tl in brackets shows it) against main, one process.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts"
d=docs/gpu/fp8-widen-cost; rev=$(cat build/REV 2>/dev/null || echo "?")
(echo "rev $rev"; timeout 200 python3 scripts/ab_seesaw.py --cache fp8 --shapes 128x128x16384,64x64x4096 \
  main wg1=$d/skip-wg1-widening.patch wg0=$d/skip-wg0-widening.patch none=$d/skip-wg1-widening.patch+$d/skip-wg0-widening.patch 2>&1) | tee $OUT/ab-widen-cost.log
