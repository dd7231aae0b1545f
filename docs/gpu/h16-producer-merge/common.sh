cd "$(dirname "${BASH_SOURCE[0]}")/snap"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat REV); echo "rev $rev"
t0=$(date +%s)
# ab NAME ROUNDS(old,new,...) NEWDIR BENCHARGS: kernel time a call, alternating.
ab() {
  name=$1; rounds=$2; newdir=$3; shift 3
  i=0
  for v in ${rounds//,/ }; do
    i=$((i+1))
    if [ $v = old ]; then d="$PWD"; r=$rev; else d="$PWD/../$newdir"; r=$(cat $d/REV); fi
    (echo "== round $i: $v ($r)"; cd $d; PYTHONPATH="$d" timeout 120 python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/$name-$i 2>&1 | tr '\r' '\n' | grep -v '^bench:') >> $OUT/$name.log
    echo "round $i $v" | tee -a $OUT/$name-kernel.log
    python3 -c "import json; d=json.load(open('/tmp/$name-$i/results.json')); [print('  kernel', s['B'], s['H'], s['L'], p, round(v['device_ms'], 4), v['kernels_per_call']) for s in d['shapes'] for p, v in s['paths'].items() if 'device_ms' in v]" | tee -a $OUT/$name-kernel.log
    echo "t $(( $(date +%s) - t0 )) s"
  done
}
part() {  # name, timeout, budget, bench args: a sweep part on this snapshot, every path
  name=$1; to=$2; budget=$3; shift 3
  (echo "rev $rev"; timeout $to python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget $budget 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-$name.log | sort -u; tail -n 1 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
