#!/usr/bin/env bash
# Call 3 (~400 s): B 1 and 4 at H 16/64/128, B 128 at H 32 and 128, then #21's fp8 rows
# (B=128, L=16384, H 16 and 128) as the session's device time allows.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part small 200 180 --batch 1,4 --heads 16,64,128 --paths $P
part large-b128-h32-h128 110 95 --batch 128 --heads 32,128 --paths $P
left=$(( ${CALL_S:-400} - ($(date +%s) - t0) ))
[ $left -gt 60 ] && part fp8-b128-l16384 $left $(( left - 15 )) --batch 128 --heads 16,128 --lens 16384 --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm
