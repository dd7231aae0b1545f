#!/usr/bin/env bash
# The sweep, part b (our paths and vLLM's; see sweep-a.sh).
source "$(dirname "$0")/common.sh"
P=triton,triton-occupancy,vllm
part large-b16-b64 280 250 --batch 16,64 --heads 16,64,128 --paths $P
part h32 230 200 --heads 32 --paths $P
part large-h128 80 70 --batch 128 --heads 128 --paths $P
