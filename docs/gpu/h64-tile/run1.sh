#!/usr/bin/env bash
# One call on the H200: ab_wide.py (logs to $OUT).
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/h32-tile"
(echo "rev $rev"; timeout 300 python3 docs/gpu/h64-tile/ab_wide.py 2>&1; echo "rc=$?") > $OUT/ab-wide.log
cat $OUT/ab-wide.log
