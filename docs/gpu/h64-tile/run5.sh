#!/usr/bin/env bash
# Prepared, not run (for the next lease; call 1 is docs/gpu/h16-bf16/run3.sh, the whole
# GPU suite on the final tree). Call 2: ab_tl.py (the 32-head tiles against the tl
# kernel that runs where the splits hold one block), then the sweep's `small` part on
# the final tree (its 1/64/1024 and 1/128/1024 rows back on the tl kernel). Logs to $OUT.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16"
(echo "rev $rev"; timeout 150 python3 docs/gpu/h64-tile/ab_tl.py 2>&1; echo "rc=$?") > $OUT/ab-tl.log
cat $OUT/ab-tl.log
part small 200 180 --batch 1,4 --heads 16,64,128 --paths $P
