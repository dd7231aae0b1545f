#!/usr/bin/env bash
# The two ring builds against the register kernel, each in its own tree, rounds
# ring/rnext/rnext/ring (ring_ab2.py: reg and that tree's ring kernel, alternating, both
# stages); then gluon_check --only-fp8-h16 --skip-timing on rnext (both 16-head kernels).
source "$(dirname "$0")/common.sh"
for t in ring rnext rnext ring; do
  D="$PWD/../$t"
  (cd $D; echo "== $t $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 120 python3 ../ring_ab2.py 2>&1) | tee -a $OUT/ring-ab2.log
  echo "t $(( $(date +%s) - t0 )) s"
done
D="$PWD/../rnext"
(cd $D; echo "rev $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 200 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/rnext-check.log; grep -c PASS $OUT/rnext-check.log; grep -E "FAIL|Error" $OUT/rnext-check.log | head; tail -n 1 $OUT/rnext-check.log
echo "done $(( $(date +%s) - t0 )) s"
