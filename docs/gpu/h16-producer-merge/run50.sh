#!/usr/bin/env bash
# tl on an fp8 cache with fp16 q (stage 1 / both stages, us).
source "$(dirname "$0")/common.sh"
timeout 300 python3 ../t50/tlfp16.py 2>&1 | tee $OUT/tlfp16.log
echo "done $(( $(date +%s) - t0 )) s"
