#!/usr/bin/env bash
# Device call, second lease (about 4 minutes): this tree (NEW: the Gluon kernels as a
# package, one plan for every kernel choice, the cubin's hash in the call's PTX field
# on jaxlib >= 0.11.2) against the tree before the jax-triton change (OLD, .ab/old =
# 30be8da: mla_jax's own FFI handler), side by side. Logs to $OUT.
#   1. check.py: every stage 1, bf16 and fp8, by both trees: bitwise equal, float64.
#   2. chain.py: 20-call chains at B=1, by both trees, with XLA's command buffers as
#      they are by default and with custom calls in them (+CUSTOM_CALL).
#   3. the bench at 12 shapes by each tree (device time from the profiler).
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
  echo "== NEW"; new timeout 200 python3 $D/check.py run /tmp/new.npz 2>&1 | grep -v "^WARNING"
  echo "== OLD"; old timeout 200 python3 $D/check.py run /tmp/old.npz 2>&1 | grep -v "^WARNING"
  echo "== compare (A = OLD, B = NEW)"; new timeout 120 python3 $D/check.py compare /tmp/old.npz /tmp/new.npz
} > $OUT/check2.log 2>&1
cat $OUT/check2.log
CB=--xla_gpu_enable_command_buffer=+CUSTOM_CALL
{
  for flags in "" "$CB"; do
    echo "== OLD, XLA_FLAGS='$flags'"; old env XLA_FLAGS="$flags" timeout 120 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
    echo "== NEW, XLA_FLAGS='$flags'"; new env XLA_FLAGS="$flags" timeout 120 python3 $D/chain.py triton_kernel_call_ffi 2>&1 | grep -v "^WARNING"
  done
} > $OUT/chain2.log 2>&1
cat $OUT/chain2.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy --repeats 3 --time-budget 90"
for tree in old new; do
  (echo "$tree"; $tree timeout 130 python3 -m mla_jax bench $ARGS --out /tmp/b-$tree --markdown /tmp/b-$tree.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench2-$tree.log
  cp /tmp/b-$tree/results.json $OUT/bench2-$tree.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |wrote" $OUT/bench2-$tree.log
done
