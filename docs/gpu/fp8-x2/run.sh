#!/usr/bin/env bash
# Prepared, not run: ab_x2.py on the H200 (about 3 minutes). Logs to $OUT.
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
(echo "rev $rev"; timeout 300 python3 docs/gpu/fp8-x2/ab_x2.py 2>&1; echo "rc=$?") > $OUT/ab-x2.log
cat $OUT/ab-x2.log
