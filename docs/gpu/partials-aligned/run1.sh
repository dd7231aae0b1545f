#!/bin/bash
# One device call: the slot A/B (ab_slot.py). Logs to $OUT; run from the repository root.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
git rev-parse --short HEAD > "$OUT/rev.txt" 2>/dev/null || cat build/REV > "$OUT/rev.txt"
git diff --stat >> "$OUT/rev.txt" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv >> "$OUT/rev.txt"
t0=$(date +%s)
timeout 540 python docs/gpu/partials-aligned/ab_slot.py > "$OUT/ab-slot.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-slot.log"
