#!/bin/bash
# One device call: the bench beside vLLM at 16/64/4096 (issue #21's open H=64 row) in
# five processes one after another, to see how its kernel time spreads between
# processes. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV)
t0=$(date +%s)
for i in 1 2 3 4 5; do
  (echo "rev $rev, process $i"; timeout 45 python3 -m mla_jax bench --batch 16 --heads 64 \
    --lens 4096 --paths triton-occupancy,vllm --repeats 3 --out /tmp/bench-$i \
    --markdown /tmp/bench-$i/benchmarks.md --time-budget 30 2>&1 | tr '\r' '\n' \
    | grep -v '^bench:') >> "$OUT/bench-16-64-4096.log"
  echo "process $i $(( $(date +%s) - t0 )) s" >> "$OUT/bench-16-64-4096.log"
done
