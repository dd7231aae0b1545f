#!/usr/bin/env bash
# The GPU suite on the staged epilogue (working tree on b728eb5).
source "$(dirname "$0")/common.sh"
N="$PWD/../new"
(cd $N; echo "rev $(cat REV)"; PYTHONPATH="$N:$N/scripts" timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py 2>&1 | tail -n 15) > $OUT/staged-gpu-tests.log; tail -n 3 $OUT/staged-gpu-tests.log
echo "done $(( $(date +%s) - t0 )) s"
