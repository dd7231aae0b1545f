#!/usr/bin/env bash
# rnext (with gluon_check's ragged fix): gluon_check --only-fp8-h16 --skip-timing; ring_ab2
# at short splits (64-512 tokens); then the GPU suite.
source "$(dirname "$0")/common.sh"
D="$PWD/../rnext"
(cd $D; echo "rev $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 200 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/rnext-check.log; grep -c PASS $OUT/rnext-check.log; grep -E "FAIL|Error" $OUT/rnext-check.log | head; tail -n 1 $OUT/rnext-check.log
echo "t $(( $(date +%s) - t0 )) s"
(cd $D; echo "== rnext $(cat REV) short splits"; PYTHONPATH="$D:$D/scripts" timeout 120 python3 ../ring_ab2.py 1x16x4096,4x16x1024,1x16x16384,8x16x4096,64x16x1024,128x16x1024,16x32x4096 2>&1) | tee $OUT/ring-ab2-short.log
echo "t $(( $(date +%s) - t0 )) s"
(cd $D; echo "rev $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 420 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py 2>&1 | tail -n 25) > $OUT/rnext-gpu-tests.log; tail -n 4 $OUT/rnext-gpu-tests.log
echo "done $(( $(date +%s) - t0 )) s"
