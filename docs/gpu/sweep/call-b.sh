#!/usr/bin/env bash
# Device call B (about 9 minutes): the sweep's parts large-b16-b64 (B 16 and 64 at H 16,
# 64, 128), small (B 1 and 4) and large-b128-h32-h128, then the fp8 rows (B=128,
# L=16384, H 16 and 128: the bf16 cache, the fp8 cache by the default and the fp8-MMA
# path, and vLLM) as the call's time allows.
source docs/gpu/sweep/common.sh
part large-b16-b64 230 205 --batch 16,64 --heads 16,64,128 --paths $P
part small 190 170 --batch 1,4 --heads 16,64,128 --paths $P
part large-b128-h32-h128 110 95 --batch 128 --heads 32,128 --paths $P
left=$(( 570 - ($(date +%s) - t0) ))
[ $left -gt 45 ] && part fp8-b128-l16384 $left $(( left - 15 )) --batch 128 --heads 16,128 --lens 16384 --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm
