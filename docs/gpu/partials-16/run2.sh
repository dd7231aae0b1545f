#!/bin/bash
# One device call: gluon_check.py --skip-timing on the tree with the bf16 partials
# landed (0b3289b): every case against float64 and the tl kernels, the Gluon partials
# unpacked (Launch.partials) and compared with the tl kernel's. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout 185 python scripts/gluon_check.py --skip-timing > "$OUT/check-bf16-partials.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-bf16-partials.log"
