#!/usr/bin/env bash
# The GPU suite on land: tests/test_gpu.py + tests/test_safety.py.
source "$(dirname "$0")/common.sh"
D="$PWD/../land"
(cd $D; echo "rev $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 450 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py 2>&1 | tail -n 25) > $OUT/land-gpu-tests.log; tail -n 4 $OUT/land-gpu-tests.log
echo "done $(( $(date +%s) - t0 )) s"
