#!/usr/bin/env bash
# Device call 3 (about 9.5 minutes; carry .whl, .vllm, .ab): the sweep's parts
# large-b16-b64 (B 16 and 64 at H 16, 64, 128) and h32 (H=32, B 1-64), then the fp8
# rows (B=128, L=16384, H 16 and 128: the bf16 cache, the fp8 cache by the default and
# the fp8-MMA path, and vLLM) as time allows. Logs to $OUT: sweep-3.tar.
set -u
source docs/gpu/h100-1207/common.sh
part large-b16-b64 230 --batch 16,64 --heads 16,64,128
part h32 150 --batch 1,4,16,64 --heads 32
left=$(( deadline - ($(date +%s) - t0) ))
if [ $left -ge 60 ]; then
  (echo "rev $rev"; new timeout $left python3 -m mla_jax bench --batch 128 --heads 16,128 --lens 16384 \
     --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm --repeats 3 --out /tmp/b-fp8 \
     --markdown /tmp/b-fp8.md --time-budget $(( left - 20 )) 2>&1 | tr '\r' '\n' | grep -v '^bench:') \
     > /tmp/parts/bench-fp8-b128-l16384.log
  cp /tmp/b-fp8/results.json /tmp/parts/fp8-b128-l16384.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " /tmp/parts/bench-fp8-b128-l16384.log | sort -u
fi
pack sweep-3
el
