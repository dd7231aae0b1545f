#!/usr/bin/env bash
# fp8 seesaw: gluon_check --only-fp8 --skip-timing, then the A/B against the column-split kernel.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts"
echo "rev $(cat build/REV)"; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(echo "rev $(cat build/REV)"; timeout 200 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check.log
grep -c PASS $OUT/check.log; grep -E "FAIL|Error|error" $OUT/check.log | head -20; tail -n 2 $OUT/check.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $(cat build/REV)"; timeout 330 python3 build/ab_seesaw8.py ${1:-} 2>&1) | tee $OUT/ab.log
echo "t $(( $(date +%s) - t0 )) s"
