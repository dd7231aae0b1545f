#!/usr/bin/env bash
# Prepared, not run (about 7 minutes): the cubin prototype on the H200. Logs to $OUT.
# 1. check.py: every stage 1 through both routes, against each other and float64.
# 2. the first call in new processes, both routes, three processes a shape, a new
#    Triton cache folder a shape and route; then at 4/128/4096 with JAX's persistent
#    compilation cache as well.
# 3. the bench at 12 shapes by both routes, each in its own process, vLLM beside.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); D=docs/gpu/cubin-ffi
LIB=/tmp/libcubin_launch.so
if command -v g++ >/dev/null; then python $D/cubin_ffi.py $LIB > $OUT/build.log 2>&1 || cp build/cubin-ffi/libcubin_launch.so $LIB
else cp build/cubin-ffi/libcubin_launch.so $LIB; echo "no g++: the library built on the CPU machine" > $OUT/build.log; fi
(echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc timeout 200 python $D/check.py $LIB 2>&1 | grep -v "^WARNING"; echo "rc=$?") > $OUT/check.log
cat $OUT/check.log
cmd_for() { if [ $1 = jaxlib ]; then echo scripts/first_call.py; else echo "$D/first_call_cubin.py $LIB"; fi; }
{
  echo "rev $rev"
  for shape in "4 128 4096" "16 64 1024" "64 16 4096" "1 16 1024"; do
    set -- $shape
    for route in jaxlib cubin; do
      dir=/tmp/tc-$route-$1-$2-$3; rm -rf $dir
      for i in 1 2 3; do
        echo -n "$route: "; TRITON_CACHE_DIR=$dir timeout 60 python $(cmd_for $route) --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
    done
  done
  # With JAX's persistent compilation cache too (XLA's compile from disk), 4/128/4096.
  for route in jaxlib cubin; do
    dir=/tmp/tc-jc-$route; rm -rf $dir $dir-jax
    for i in 1 2 3; do
      echo -n "$route + JAX cache: "; TRITON_CACHE_DIR=$dir timeout 60 python $(cmd_for $route) --jax-cache $dir-jax 2>&1 | grep "first mla_decode"
    done
  done
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy,vllm --repeats 3 --time-budget 70"
(echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc timeout 100 python -m mla_jax bench $ARGS --out /tmp/b-jaxlib 2>&1 | grep -v "^bench:") > $OUT/bench-jaxlib.log
(echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc timeout 100 python $D/bench_cubin.py $LIB $ARGS --out /tmp/b-cubin 2>&1 | grep -v "^bench:") > $OUT/bench-cubin.log
cp /tmp/b-jaxlib/results.json $OUT/bench-jaxlib.json; cp /tmp/b-cubin/results.json $OUT/bench-cubin.json
tail -n 14 $OUT/bench-jaxlib.log $OUT/bench-cubin.log
