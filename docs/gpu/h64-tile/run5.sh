#!/usr/bin/env bash
# Prepared, not run: the whole sweep on the final tree, in one lease of four calls back
# to back (logs and parts to $OUT; merge with docs/gpu/sweep-c11b1c4/merge.sh after
# moving the replaced parts to docs/benchmarks/<their rev>/):
#   call 1: bash docs/gpu/h16-bf16/run3.sh        the whole GPU suite (~470 s)
#   call 2: bash docs/gpu/sweep-1203b/sweep.sh    large-b16-b64, h32, large-b128 (~510 s)
#   call 3: bash docs/gpu/h64-tile/run5.sh        this: ab_tl.py, then sweep2.sh
# Call 3: ab_tl.py (the 32-head tiles against the tl kernel where the splits hold one
# block, ~60 s), then the sweep's `small` and `large-b128-h32-h128` parts and #21's fp8
# rows (docs/gpu/sweep-1203b/sweep2.sh, its own clock).
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16"
(echo "rev $rev"; timeout 100 python3 docs/gpu/h64-tile/ab_tl.py 2>&1; echo "rc=$?") > $OUT/ab-tl.log
cat $OUT/ab-tl.log
CALL_S=430 bash docs/gpu/sweep-1203b/sweep2.sh
