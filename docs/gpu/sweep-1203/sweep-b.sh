#!/usr/bin/env bash
# The sweep, part b: B 16 and 64 at H 16, 64, 128; B 128 at H 32 and 128; then the
# fp8 rows of #21 (B=128, L=16384, H 16 and 128; the default and fp8-MMA paths).
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part large-b16-b64 240 215 --batch 16,64 --heads 16,64,128 --paths $P
part large-b128-h32-h128 110 95 --batch 128 --heads 32,128 --paths $P
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && part fp8-b128-l16384 $left $(( left - 15 )) --batch 128 --heads 16,128 --lens 16384 --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm
