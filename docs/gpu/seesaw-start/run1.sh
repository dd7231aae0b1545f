#!/bin/bash
# One device call: the seesaw's stamps (stamps.py); the partial stores as a loop
# (../store-loop/store-loop.patch) and the TMA descriptors made after Q's copies and the
# page reads (desc-late.patch) against main, 16-bit cache; the bench beside vLLM at the
# shapes whose rows run as two-split clusters (B=64, H 32 and 64); then the store-loop
# A/B on an fp8 cache while time is left. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat build/REV > "$OUT/rev1.txt"
t0=$(date +%s)
timeout 120 python docs/gpu/seesaw-start/stamps.py > "$OUT/stamps.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/stamps.log"
timeout 270 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x128x4096,128x128x16384 \
  main loop=docs/gpu/store-loop/store-loop.patch late=docs/gpu/seesaw-start/desc-late.patch \
  > "$OUT/ab-start.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-start.log"
(timeout 120 python3 -m mla_jax bench --batch 64 --heads 32,64 --lens 1024,4096,16384 \
  --paths triton-occupancy,vllm --repeats 3 --out /tmp/bench-64 \
  --markdown /tmp/bench-64/benchmarks.md --time-budget 105 2>&1 | tr '\r' '\n' \
  | grep -v '^bench:') > "$OUT/bench-two-split.log"
cp /tmp/bench-64/results.json "$OUT/bench-two-split.json"
echo "bench $(( $(date +%s) - t0 )) s" >> "$OUT/bench-two-split.log"
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && timeout $left python scripts/ab_seesaw.py --cache fp8 --shapes 64x64x4096,16x128x4096 \
  main loop=docs/gpu/store-loop/store-loop.patch > "$OUT/ab-store-loop-fp8.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-store-loop-fp8.log"
