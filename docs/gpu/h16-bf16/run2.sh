#!/bin/bash
# The sweep's 17 H=16 rows again on the final routing (the 16-bit 16-head kernel from
# 128 tokens a split, halving the occupancy count only where its grid holds more
# programs than SMs), one bench part beside vLLM. Logs to $OUT.
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part h16 170 150 --batch 1,4,16,64,128 --heads 16 --paths $P
