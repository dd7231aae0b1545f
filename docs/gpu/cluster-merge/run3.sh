#!/bin/bash
# One device call: ab_cluster.py on v2 (a row's two splits merged by the pair, each
# merging warpgroup with its own partial from shared memory), the Gluon GPU tests
# through mla_decode, then the bench beside vLLM at the two-split shapes. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat build/REV > "$OUT/rev3.txt"
t0=$(date +%s)
timeout 90 python docs/gpu/cluster-merge/ab_cluster.py 64/64/1024 > "$OUT/ab-pair-first.log" 2>&1
rc=$?
echo "rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/ab-pair-first.log"
[ $rc -ne 0 ] && exit 0
timeout 150 python docs/gpu/cluster-merge/ab_cluster.py 64/64/4096 64/32/1024 64/32/4096 \
  32/128/1024 32/128/4096 64/64/16384 32/128/16384 > "$OUT/ab-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-pair.log"
timeout 170 python -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through" > "$OUT/gpu-tests-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests-pair.log"
left=$(( 575 - ($(date +%s) - t0) ))
(timeout $left python3 -m mla_jax bench --batch 64 --heads 32,64 --lens 1024,4096 \
  --paths triton-occupancy,vllm --repeats 3 --out /tmp/bench-pair \
  --markdown /tmp/bench-pair/benchmarks.md --time-budget $(( left - 20 )) 2>&1 | tr '\r' '\n' \
  | grep -v '^bench:') > "$OUT/bench-pair.log"
cp /tmp/bench-pair/results.json "$OUT/bench-pair.json"
echo "bench $(( $(date +%s) - t0 )) s" >> "$OUT/bench-pair.log"
