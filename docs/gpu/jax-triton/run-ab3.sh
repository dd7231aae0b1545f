#!/usr/bin/env bash
# Device call (about 5 minutes; it ran on an H100 on 2026-12-07, logs/*3.*): this tree (NEW: jax_triton.triton_call lowered to
# jaxlib's triton_kernel_call_ffi, cubins without their line table, the plan's import
# hashing no kernel) against the tree before the jax-triton change (OLD, .ab/old =
# 30be8da: mla_jax's own FFI handler, built with g++), side by side in one lease.
# Logs to $OUT (seven files; in logs/ with a 3 after the name):
#   check.log       every stage 1, bf16 and fp8, by both trees: bitwise equal, float64
#   first-call.log  the first mla_decode in new processes, cold and warm, both trees;
#                   then where a warm one spends its time (cProfile, NEW)
#   chain.log       20-call chains at B=1 by both trees; NEW with XLA's command
#                   buffers off, as they are by default, and with min graph size 1;
#                   then what XLA's logs say of command buffers in one run
#   bench-{old,new}.{log,json}  the bench at 12 shapes by each tree (device time)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
NEW=$PWD OLD=$PWD/.ab/old D=$PWD/docs/gpu/jax-triton
new() { PYTHONPATH="/tmp/site:$NEW:$NEW/scripts" TRITON_CACHE_DIR=/tmp/tc-new "$@"; }
old() { (cd "$OLD" && PYTHONPATH="$OLD:$OLD/scripts" TRITON_CACHE_DIR=/tmp/tc-old "$@"); }
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
{
  echo "NEW $(cat .ab/REV)  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  new python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
  echo "== NEW"; new timeout 200 python3 $D/check.py run /tmp/new.npz 2>&1 | grep -v "^WARNING"
  echo "== OLD"; old timeout 200 python3 $D/check.py run /tmp/old.npz 2>&1 | grep -v "^WARNING"
  echo "== compare (A = OLD, B = NEW)"; new timeout 120 python3 $D/check.py compare /tmp/old.npz /tmp/new.npz
  el
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
  echo "== NEW, a warm first call under cProfile (B=1 H=16 L=1024): the 30 costliest"
  new env TRITON_CACHE_DIR=/tmp/fc-new-1-16-1024 timeout 60 python3 -m cProfile -s cumtime scripts/first_call.py --batch 1 --heads 16 --max-len 1024 2>&1 | grep -v "^WARNING" | head -45
  el
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log | head -40
{
  echo "== OLD, XLA_FLAGS=''"; old env XLA_FLAGS="" timeout 120 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  for flags in "" "--xla_gpu_enable_command_buffer=" "--xla_gpu_graph_min_graph_size=1"; do
    echo "== NEW, XLA_FLAGS='$flags'"; new env XLA_FLAGS="$flags" timeout 120 python3 $D/chain.py triton_kernel_call_ffi 2>&1 | grep -v "^WARNING"
  done
  echo "== NEW, default flags, XLA's logs of command buffers (counts of matching lines) and the dump's files that name them"
  new env TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=command_buffer_thunk=2,command_buffer_cmd=2,command_buffer_conversion_pass=2,command_buffer_scheduling=2,custom_call_thunk=2 \
    XLA_FLAGS="--xla_dump_to=/tmp/xdump --xla_dump_hlo_as_text" timeout 120 python3 $D/chain.py triton_kernel_call_ffi > /tmp/cb.log 2>&1
  grep -v "^[IWE][0-9]" /tmp/cb.log | tail -3
  grep -io "command.buffer[a-z_ ]*\|commandbuffer[a-z_]*\|graph[a-z_ ]*launch\|custom call[a-z_ ]*" /tmp/cb.log | sort | uniq -c | sort -rn | head -20
  grep -i "command" /tmp/cb.log | head -8 | cut -c1-300
  ls /tmp/xdump | head -30; grep -lis "command_buffer\|CommandBuffer" /tmp/xdump/* | head; grep -ohis "command_buffer[a-z_.0-9]*" /tmp/xdump/* | sort | uniq -c | head
  el
} > $OUT/chain.log 2>&1
cat $OUT/chain.log | head -60
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy --repeats 3 --time-budget 80"
for tree in old new; do
  (echo "$tree"; $tree timeout 120 python3 -m mla_jax bench $ARGS --out /tmp/b-$tree --markdown /tmp/b-$tree.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$tree.log
  cp /tmp/b-$tree/results.json $OUT/bench-$tree.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |wrote" $OUT/bench-$tree.log
done
el
