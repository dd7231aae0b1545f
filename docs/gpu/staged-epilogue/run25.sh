#!/usr/bin/env bash
# The seesaw's output through shared memory (working tree on b728eb5): gluon_check, then
# A/Bs against b728eb5 in kernel time (old, new, new, old).
source "$(dirname "$0")/common.sh"
N="$PWD/../new"
(cd $N; echo "rev $(cat REV)"; PYTHONPATH="$N:$N/scripts" timeout 150 python3 scripts/gluon_check.py --heads 128,64,32 --skip-timing 2>&1) > $OUT/staged-gluon-check.log; tail -n 2 $OUT/staged-gluon-check.log; echo "FAIL lines: $(grep -c FAIL $OUT/staged-gluon-check.log)"
echo "checks $(( $(date +%s) - t0 )) s"
ab staged-ab-h128 old,new,new,old new --batch 16,64,128 --heads 128 --lens 4096,16384 --paths triton-occupancy
ab staged-ab-h32-64 old,new,new,old new --batch 16,64 --heads 32,64 --lens 1024,4096 --paths triton-occupancy
echo "done $(( $(date +%s) - t0 )) s"
