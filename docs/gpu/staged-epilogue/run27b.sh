#!/usr/bin/env bash
# Sweep rows on the staged epilogue (working tree on b728eb5), all paths with vLLM.
source "$(dirname "$0")/common.sh"
cd ../new; cp -r ../snap/.vllm .; export PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"; rev=$(cat REV)
part() {  # name, timeout, budget, bench args
  name=$1; to=$2; budget=$3; shift 3
  (echo "rev $rev"; timeout $to python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget $budget 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-$name.log | sort -u; tail -n 1 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
part h32-b16-b64 150 130 --batch 16,64 --heads 32
part h64-b64 100 80 --batch 64 --heads 64
