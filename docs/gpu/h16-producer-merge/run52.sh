#!/usr/bin/env bash
# wip/fp8-h16-ring: gluon_check --only-fp8-h16 with the ring kernel (FP8_H16_RING), then
# ring_ab.py (ring vs reg vs tl).
source "$(dirname "$0")/common.sh"
R="$PWD/../ring"
(cd $R; echo "rev $(cat REV)"; PYTHONPATH="$R:$R/scripts" timeout 230 python3 scripts/gluon_check.py --only-fp8-h16 2>&1) > $OUT/ring-check.log; grep -c PASS $OUT/ring-check.log; grep -E "FAIL|Error|error" $OUT/ring-check.log | head; grep -A12 "timing" $OUT/ring-check.log | cut -c1-300; tail -n 3 $OUT/ring-check.log
echo "check $(( $(date +%s) - t0 )) s"
(cd $R; PYTHONPATH="$R:$R/scripts" timeout 280 python3 ../t50/ring_ab.py 2>&1) > $OUT/ring-ab.log; cat $OUT/ring-ab.log
echo "done $(( $(date +%s) - t0 )) s"
