#!/usr/bin/env bash
# land (the ring kernel as the one 16-head fp8 kernel, from 64 tokens a split):
# gluon_check --only-fp8-h16 --skip-timing; land against main through mla_decode on the
# fp8 cache (rounds old/new/new/old); the fp8 bench on land.
source "$(dirname "$0")/common.sh"
D="$PWD/../land"
(cd $D; echo "rev $(cat REV)"; PYTHONPATH="$D:$D/scripts" timeout 150 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/land-check.log; grep -c PASS $OUT/land-check.log; grep -E "FAIL|Error" $OUT/land-check.log | head; tail -n 1 $OUT/land-check.log
echo "t $(( $(date +%s) - t0 )) s"
ab land-ab old,new,new,old land --batch 1,16,64,128 --heads 16,32 --lens 4096,16384 --paths triton-fp8
cd $D; rev=$(cat REV); export PYTHONPATH="$D:$D/scripts"
part fp8 150 130 --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton,triton-occupancy,triton-fp8,vllm
echo "done $(( $(date +%s) - t0 )) s"
