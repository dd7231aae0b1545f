#!/usr/bin/env bash
# Device call 1 (about 7 minutes): this tree (NEW: jax_triton.triton_call, lowered to
# jaxlib's triton_kernel_call_ffi with the cubin) against the tree before it (OLD,
# .ab/old = 30be8da: mla_jax's own FFI handler, built with g++), side by side in one
# lease. Logs to $OUT.
#   1. check.py: every stage 1, bf16 and fp8, by both trees: bitwise equal, float64.
#   2. the first mla_decode in new processes (scripts/first_call.py), a cold one and
#      three warm ones a shape and tree, each tree its own Triton cache folder.
#   3. chain.py: 20-call chains at B=1, wall time a call and command-buffer capture.
#   4. the bench at 12 shapes by each tree (device time from the profiler).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
NEW=$PWD OLD=$PWD/.ab/old D=$PWD/docs/gpu/jax-triton
new() { PYTHONPATH="/tmp/site:$NEW:$NEW/scripts" TRITON_CACHE_DIR=/tmp/tc-new "$@"; }
old() { (cd "$OLD" && PYTHONPATH="$OLD:$OLD/scripts" TRITON_CACHE_DIR=/tmp/tc-old "$@"); }
{
  echo "NEW $(cat .ab/REV)  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  new python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
} > $OUT/env.txt 2>&1
cat $OUT/env.txt
{
  echo "== NEW"; new timeout 200 python3 $D/check.py run /tmp/new.npz 2>&1 | grep -v "^WARNING"
  echo "== OLD"; old timeout 200 python3 $D/check.py run /tmp/old.npz 2>&1 | grep -v "^WARNING"
  echo "== compare (A = OLD, B = NEW)"; new timeout 120 python3 $D/check.py compare /tmp/old.npz /tmp/new.npz
} > $OUT/check.log 2>&1
cat $OUT/check.log
{
  for shape in "4 128 4096" "16 64 1024" "64 16 4096" "1 16 1024"; do
    set -- $shape
    for tree in old new; do
      for i in cold warm warm warm; do
        echo -n "$tree $i: "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
    done
  done
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
{
  echo "== OLD"; old timeout 120 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  echo "== NEW"; new timeout 120 python3 $D/chain.py triton_kernel_call_ffi 2>&1 | grep -v "^WARNING"
} > $OUT/chain.log 2>&1
cat $OUT/chain.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy --repeats 3 --time-budget 90"
for tree in old new; do
  (echo "$tree"; $tree timeout 130 python3 -m mla_jax bench $ARGS --out /tmp/b-$tree --markdown /tmp/b-$tree.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$tree.log
  cp /tmp/b-$tree/results.json $OUT/bench-$tree.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |wrote" $OUT/bench-$tree.log
done
