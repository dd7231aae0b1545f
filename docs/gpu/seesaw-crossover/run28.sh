#!/usr/bin/env bash
# wip/seesaw-early-q: gluon_check, then A/Bs against main in kernel time (old, new, new,
# old); then the crossover on main's kernels (gluon_check --crossover).
source "$(dirname "$0")/common.sh"
E="$PWD/../eq"
(cd $E; echo "rev $(cat REV)"; PYTHONPATH="$E:$E/scripts" timeout 150 python3 scripts/gluon_check.py --heads 128,64,32 --skip-timing 2>&1) > $OUT/eq-gluon-check.log; tail -n 2 $OUT/eq-gluon-check.log; echo "FAIL lines: $(grep -c FAIL $OUT/eq-gluon-check.log)"
echo "checks $(( $(date +%s) - t0 )) s"
ab eq-ab-h128 old,new,new,old eq --batch 16,128 --heads 128 --lens 4096 --paths triton-occupancy
ab eq-ab-h32-64 old,new,new,old eq --batch 16,64 --heads 32,64 --lens 1024,4096 --paths triton-occupancy
(echo "rev $rev"; timeout 200 python3 scripts/gluon_check.py --crossover 2>&1) > $OUT/crossover.log; cat $OUT/crossover.log
echo "done $(( $(date +%s) - t0 )) s"
