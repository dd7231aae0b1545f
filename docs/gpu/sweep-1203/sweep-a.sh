#!/usr/bin/env bash
# The sweep on the current kernels, our paths and vLLM's, part a: B 1 and 4 at H 16,
# 64, 128; B 128 at H 16 and 64; H=32 at every B.
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
part small 290 265 --batch 1,4 --heads 16,64,128 --paths $P
part large-b128 100 85 --batch 128 --heads 16,64 --paths $P
part h32 170 150 --heads 32 --batch 1,4,16,64 --paths $P
