#!/usr/bin/env bash
# The two launch routes on the H200, side by side (about 8 minutes). Logs to $OUT.
# 1. check.py: every stage 1 through both routes, against each other and float64.
# 2. the first call in new processes, both routes, three processes a shape, a new
#    Triton cache folder a shape and route; then at 4/128/4096 with JAX's persistent
#    compilation cache as well.
# 3. the bench at 12 shapes by both routes, each in its own process, vLLM beside.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); D=docs/gpu/cubin-ffi
(echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc timeout 150 python $D/check.py 2>&1 | grep -v "^WARNING"; echo "rc=$?") > $OUT/check.log
cat $OUT/check.log
{
  echo "rev $rev"
  for shape in "4 128 4096" "16 64 1024" "64 16 4096" "1 16 1024"; do
    set -- $shape
    for route in jaxlib ffi; do
      dir=/tmp/tc-$route-$1-$2-$3; rm -rf $dir
      for i in 1 2 3; do
        echo -n "$route: "; TRITON_CACHE_DIR=$dir timeout 60 python $D/first_call_route.py $route --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
    done
  done
  # With JAX's persistent compilation cache too (XLA's compile from disk), 4/128/4096.
  for route in jaxlib ffi; do
    dir=/tmp/tc-jc-$route; rm -rf $dir $dir-jax
    for i in 1 2 3; do
      echo -n "$route + JAX cache: "; TRITON_CACHE_DIR=$dir timeout 60 python $D/first_call_route.py $route --jax-cache $dir-jax 2>&1 | grep "first mla_decode"
    done
  done
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy,vllm --repeats 3 --time-budget 110"
for route in ffi jaxlib; do
  (echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc timeout 140 python $D/bench_route.py $route $ARGS --out /tmp/b-$route 2>&1 | grep -v "^bench:") > $OUT/bench-$route.log
  cp /tmp/b-$route/results.json $OUT/bench-$route.json
done
tail -n 14 $OUT/bench-ffi.log $OUT/bench-jaxlib.log
