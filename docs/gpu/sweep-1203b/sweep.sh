#!/usr/bin/env bash
# Call 2 (~510 s): B 16 and 64 at H 16/64/128, H=32 at B 1-64, B 128 at H 16 and 64;
# the default path and vLLM's kernel in the same bench process.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part large-b16-b64 235 210 --batch 16,64 --heads 16,64,128 --paths $P
part h32 165 145 --heads 32 --batch 1,4,16,64 --paths $P
part large-b128 100 85 --batch 128 --heads 16,64 --paths $P
