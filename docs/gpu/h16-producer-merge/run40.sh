#!/usr/bin/env bash
# wip/fp8-h16-producer: gluon_check --only-fp8-h16 (checks against float64 and the tl
# kernel, then timing) on the producer kernel, then fp8_ws.py (both 16-head fp8 kernels
# and tl, at the occupancy splits and half).
source "$(dirname "$0")/common.sh"
W="$PWD/../ws"
(cd $W; echo "rev $(cat REV)"; PYTHONPATH="$W:$W/scripts" timeout 200 python3 scripts/gluon_check.py --only-fp8-h16 2>&1) > $OUT/ws-check.log; grep -c PASS $OUT/ws-check.log; grep FAIL $OUT/ws-check.log | head; grep -A12 "timing" $OUT/ws-check.log | cut -c1-300; tail -n 1 $OUT/ws-check.log
echo "check $(( $(date +%s) - t0 )) s"
(cd $W; echo "rev $(cat REV)"; PYTHONPATH="$W:$W/scripts" timeout 250 python3 ../fp8_ws.py 2>&1) > $OUT/ws-variants.log; cat $OUT/ws-variants.log
echo "done $(( $(date +%s) - t0 )) s"
