#!/usr/bin/env bash
# Call 2: the sweep's `large-b16-b64` part (B 16 and 64 at H 16, 64, 128), whose
# 16/64/1024 row moved. Logs to $OUT.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part large-b16-b64 235 210 --batch 16,64 --heads 16,64,128 --paths $P
