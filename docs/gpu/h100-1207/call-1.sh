#!/usr/bin/env bash
# Device call 1 (about 9.5 minutes; carry .whl, .vllm, .ab): this tree (NEW) against
# .ab/old (OLD: 30be8da, the kernels launched by mla_jax's own g++-built FFI handler),
# side by side, then the sweep's part `small`. Logs to $OUT:
#   check.log       every stage 1, bf16 and fp8, by both trees: bitwise equal, float64
#   first-call.log  every module byte-compiled first (is the bytecode read?), then the
#                   first mla_decode in new processes, cold and warm, both trees; where
#                   a warm one spends its time (first_call.py --phases, both trees), and
#                   the backend's costliest imports (NEW, -X importtime)
#   chain.log       20-call chains at B=1, both trees (NEW also with command buffers off)
#   bench-{old,new}.{log,json}  the bench at 12 shapes by each tree (device time)
#   sweep-1.tar     the part small: B 1 and 4 at H 16, 64, 128
set -u
source docs/gpu/h100-1207/common.sh
D=$NEW/docs/gpu/h100-1207
{
  echo "NEW $rev  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  new python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
  echo "== NEW"; new timeout 150 python3 $D/check.py run /tmp/new.npz 2>&1 | grep -v "^WARNING"
  echo "== OLD"; old timeout 150 python3 $D/check.py run /tmp/old.npz 2>&1 | grep -v "^WARNING"
  echo "== compare (A = OLD, B = NEW)"; new timeout 60 python3 $D/check.py compare /tmp/old.npz /tmp/new.npz
  el
} > $OUT/check.log 2>&1
cat $OUT/check.log
{
  env | grep -E "^PYTHON"
  python3 -m compileall -q -j 8 "$NEW/mla_jax" "$NEW/scripts" "$OLD/mla_jax" "$OLD/scripts" /tmp/site >/dev/null; echo "compileall rc=$?"
  for tree in new old; do
    $tree python3 -v -c "import mla_jax._triton_backend" > /tmp/v.txt 2>&1
    echo "$tree: modules read from bytecode $(grep -c 'pyc matches' /tmp/v.txt), compiled from source $(grep -c 'code object from .*\.py$' /tmp/v.txt)"
  done
  for shape in "4 128 4096" "64 16 4096" "1 16 1024"; do
    set -- $shape
    for tree in old new; do
      for i in cold warm warm warm; do
        echo -n "$tree $i: "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
      for i in 1 2; do
        echo -n "$tree warm, "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 $NEW/scripts/first_call.py --phases --batch $1 --heads $2 --max-len $3 2>&1 | grep "phases"
      done
    done
  done
  echo "== NEW, the backend's imports over 10 ms (-X importtime: self us | cumulative us | module), warm"
  new env TRITON_CACHE_DIR=/tmp/fc-new-1-16-1024 python3 -X importtime scripts/first_call.py --batch 1 --heads 16 --max-len 1024 2>&1 \
    | grep "import time" | awk -F'|' '$2+0 > 10000' | tail -25
  el
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
{
  echo "== OLD"; old timeout 60 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  for flags in "" "--xla_gpu_enable_command_buffer="; do
    echo "== NEW, XLA_FLAGS='$flags'"; new env XLA_FLAGS="$flags" timeout 60 python3 $D/chain.py triton_kernel_call_ffi 2>&1 | grep -v "^WARNING"
  done
  echo "== OLD again"; old timeout 60 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  el
} > $OUT/chain.log 2>&1
cat $OUT/chain.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy --repeats 3 --time-budget 50"
for tree in old new; do
  (echo "$tree"; $tree timeout 90 python3 -m mla_jax bench $ARGS --out /tmp/b-$tree --markdown /tmp/b-$tree.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$tree.log
  cp /tmp/b-$tree/results.json $OUT/bench-$tree.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |wrote" $OUT/bench-$tree.log
done
el
part small 200 --batch 1,4 --heads 16,64,128
pack sweep-1
el
