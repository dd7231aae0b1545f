# Sourced by sweep-a.sh and sweep-b.sh (P: the paths, all three unless set) on the device machine, from the repo root.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); echo "rev $rev"
t0=$(date +%s)
P=${P:-triton,triton-occupancy,vllm}
part() {  # name, timeout, budget, bench args: a sweep part, logs and results into $OUT
  name=$1; to=$2; budget=$3; shift 3
  (echo "rev $rev"; timeout $to python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget $budget 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-$name.log | sort -u; tail -n 1 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
