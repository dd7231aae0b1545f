#!/usr/bin/env bash
# A/B (this commit; ca8b38d ran in run14), the two small sweep parts, the GPU tests.
cd "$(dirname "$0")/snap"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat REV); echo "rev $rev"
t0=$(date +%s)
v=new
(echo "rev $rev"; timeout 120 python3 -m mla_jax bench --batch 64,128 --heads 128 --lens 4096,16384 --paths triton-occupancy,triton-fp8 --repeats 3 --out /tmp/ab-$v 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/ab-$v.log
(timeout 80 python3 -m mla_jax bench --batch 128 --heads 32,64 --lens 16384 --paths triton-occupancy --repeats 3 --out /tmp/ab2-$v 2>&1) | tr '\r' '\n' | grep -v '^bench:' >> $OUT/ab-$v.log
cp /tmp/ab-$v/results.json $OUT/ab-$v.json; cp /tmp/ab2-$v/results.json $OUT/ab2-$v.json
tail -n 12 $OUT/ab-$v.log
echo "ab $(( $(date +%s) - t0 )) s"
part() {  # name, args
  name=$1; shift
  (echo "rev $rev"; timeout 200 python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget 180 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  tail -n 4 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
part large-h128 --batch 128 --heads 128 --lens 4096,16384
part h32-large --batch 64,128 --heads 32
(echo "rev $rev"; timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_safety.py 2>&1) > $OUT/gpu-tests.log; tail -n 4 $OUT/gpu-tests.log
echo "tests $(( $(date +%s) - t0 )) s"
