#!/usr/bin/env bash
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts"
echo "rev $(cat build/REV)"; t0=$(date +%s)
(echo "rev $(cat build/REV)"; timeout 300 python3 build/ab_variants.py ${1:-} 2>&1) | tee $OUT/variants.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $(cat build/REV)"; timeout 200 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check.log
grep -c PASS $OUT/check.log; grep -E "FAIL|Error|error" $OUT/check.log | head -20; tail -n 2 $OUT/check.log
echo "t $(( $(date +%s) - t0 )) s"
