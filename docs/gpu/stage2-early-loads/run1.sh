#!/bin/bash
# One device call: stage 2 with its first partials loaded before the row's length
# (the tree) against main's (build/prev/kernels.py); the bench at the small shapes
# with vLLM beside; the GPU tests. Logs to $OUT; run from the repository root with
# build/ and .vllm/ carried.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat build/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout 240 python docs/gpu/stage2-early-loads/ab_stage2.py build/prev/kernels.py > "$OUT/ab-stage2.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-stage2.log"
(timeout 200 python3 -m mla_jax bench --batch 16,64 --heads 16,32,64 --lens 1024,4096 \
  --paths triton-occupancy,vllm --repeats 3 --out /tmp/bench-small --markdown /tmp/bench-small/benchmarks.md \
  --time-budget 180 2>&1 | tr '\r' '\n' | grep -v '^bench:') > "$OUT/bench-small.log"
cp /tmp/bench-small/results.json "$OUT/small.json"
echo "bench $(( $(date +%s) - t0 )) s" >> "$OUT/bench-small.log"
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left python -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py -x -k "not fp8_mma" > "$OUT/gpu-tests.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests.log"
