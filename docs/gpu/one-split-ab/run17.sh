#!/usr/bin/env bash
# The sweep's other one-split shapes (64/128/*, 128/64/*, 128/128/1024), all paths.
cd "$(dirname "$0")/snap"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat REV); echo "rev $rev"
t0=$(date +%s)
part() {  # name, args
  name=$1; shift
  (echo "rev $rev"; timeout 150 python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget 120 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-$name.log; tail -n 2 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
part one-split-b64-h128 --batch 64 --heads 128
part one-split-b128-h64 --batch 128 --heads 64
part one-split-b128-h128-l1024 --batch 128 --heads 128 --lens 1024
