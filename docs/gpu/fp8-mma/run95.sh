#!/bin/bash
# One device call: the fp8-MMA stage 1's checks and timing, its GPU tests, and the fp8
# bench part (128 rows, 16384 tokens) with the fp8-MMA path beside the default ones.
# Logs to $OUT. Run from the repository root with build/ and .vllm/ carried.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat build/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout 230 python scripts/fp8_mma_check.py > "$OUT/fp8-mma-check.log" 2>&1
echo "check rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/steps.txt"
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k fp8_mma > "$OUT/gpu-tests-fp8-mma.log" 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/steps.txt"
left=$(( 580 - ($(date +%s) - t0) ))
timeout $left python -m mla_jax bench --batch 128 --heads 16,128 --lens 16384 \
  --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm --repeats 3 --out /tmp/bench-fp8 \
  --markdown /tmp/bench-fp8/benchmarks.md --time-budget $(( left - 20 )) 2>&1 \
  | tr '\r' '\n' | grep -v '^bench:' > "$OUT/bench-fp8.log"
cp /tmp/bench-fp8/results.json "$OUT/fp8.json"
echo "bench rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/steps.txt"
