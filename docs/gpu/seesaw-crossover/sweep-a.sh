#!/usr/bin/env bash
# The sweep on the snapshot's kernels, our paths and vLLM's (the XLA paths' code does
# not change: merge.sh carries them from the df8ad0c sweep), part a.
source "$(dirname "$0")/common.sh"
P=triton,triton-occupancy,vllm
part small 420 380 --batch 1,4 --heads 16,64,128 --paths $P
part large-b128 160 140 --batch 128 --heads 16,64 --paths $P
