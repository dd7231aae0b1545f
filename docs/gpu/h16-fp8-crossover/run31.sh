#!/usr/bin/env bash
# wip/gluon-h16-bf16: the 16-bit 16-head Gluon kernel (not routed), its checks and
# timing against the tl kernel (gluon_check --heads 16,20), then one slot against two;
# then the routed branch's A/B against main through mla_decode.
source "$(dirname "$0")/common.sh"
H="$PWD/../h16"
(cd $H; echo "rev $(cat REV)"; PYTHONPATH="$H:$H/scripts" timeout 240 python3 scripts/gluon_check.py --heads 16,20 2>&1) > $OUT/h16-check.log; grep -c PASS $OUT/h16-check.log; grep FAIL $OUT/h16-check.log | head; grep -A30 "^timing" $OUT/h16-check.log; tail -n 1 $OUT/h16-check.log
echo "check $(( $(date +%s) - t0 )) s"
(cd $H; echo "rev $(cat REV)"; PYTHONPATH="$H:$H/scripts" timeout 200 python3 ../h16_slots.py 2>&1) > $OUT/h16-slots.log; cat $OUT/h16-slots.log
echo "slots $(( $(date +%s) - t0 )) s"
# wip/gluon-h16-routed (mla_decode routes H < 32 on a 16-bit cache to it from 256 tokens
# a split) against main, kernel time a call; 16/16/1024 stays tl (64 tokens).
ab h16-ab old,new,new,old h16r --batch 16,64,128 --heads 16 --lens 1024,4096,16384 --paths triton-occupancy
echo "done $(( $(date +%s) - t0 )) s"
