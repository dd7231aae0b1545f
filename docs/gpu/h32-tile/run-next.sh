#!/usr/bin/env bash
# Prepared, not run (for the next lease, two calls; logs to $OUT):
#   call 1: bash docs/gpu/h16-bf16/run3.sh   (the whole GPU suite on the final tree)
#   call 2: bash docs/gpu/h32-tile/run-next.sh
# Call 2: the 32-head tile at every H=64 sweep shape (two tiles a row, at the rule's
# count, half and a quarter of it) against the routed seesaw (ab_tile.py --h64).
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment
export PYTHONPATH="$PYTHONPATH:$PWD/docs/gpu/h16-bf16"
(echo "rev $rev"; timeout 420 python3 docs/gpu/h32-tile/ab_tile.py --h64 2>&1; echo "rc=$?") \
  > $OUT/ab-tile-h64.log
cat $OUT/ab-tile-h64.log
