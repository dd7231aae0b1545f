#!/usr/bin/env bash
# Device call (about 8 minutes, one GPU; carry .whl, .vllm and .ab): logs to $OUT.
#   first-call.log  the first mla_decode in new processes, this tree (NEW) against
#                   .ab/old (OLD, 30be8da, mla_jax's own FFI handler), with every
#                   module byte-compiled first, as an installed package is (the device
#                   machine's Python writes no bytecode of its own)
#   gpu-suite.log   the test files that run kernels, models or tools on the GPU (every
#                   test marked gpu, the launch, lowering, MoE and prefill tests), less
#                   the interpreter's, 12 xdist workers sharing the GPU
#   moe-bench.log, moe.json          docs/gpu/moe/bench_moe.py (short config sweep)
#   prefill-bench.log, prefill.json  docs/gpu/prefill/bench_prefill.py (short sweep)
# Committed beside this script (87c2e0b, one H100, 2026-12-07): the MoE and prefill
# logs, which the docs cite; the JSON files repeat their tables. Its first-call and
# suite logs were superseded by ../h100-1207/ (they are in git at 458baaf).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
NEW=$PWD OLD=$PWD/.ab/old
{
  echo "NEW $(cat .ab/REV)  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  env | grep -E "^PYTHON" ; python3 -c 'import sys; print("dont_write_bytecode", sys.dont_write_bytecode)'
  python3 -m compileall -q -j 8 "$NEW/mla_jax" "$NEW/scripts" "$OLD/mla_jax" "$OLD/scripts" /tmp/site >/dev/null; echo "compileall rc=$?"
} > $OUT/env.txt 2>&1
cat $OUT/env.txt
new() { PYTHONPATH="/tmp/site:$NEW:$NEW/scripts" "$@"; }
old() { (cd "$OLD" && PYTHONPATH="$OLD:$OLD/scripts" "$@"); }
{
  for shape in "4 128 4096" "1 16 1024" "64 16 4096"; do
    set -- $shape
    for tree in old new; do
      for i in cold warm warm warm; do
        echo -n "$tree $i: "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
    done
  done
  el
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/tc MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
FILES="tests/gpu/test_gpu.py tests/api/test_safety.py tests/api/test_interop.py
  tests/kernels/test_kernel_cache.py tests/kernels/test_lowering.py tests/tools/test_compare.py
  tests/tools/test_demo.py tests/model/test_deepseek.py tests/model/test_generate.py
  tests/api/test_fp8.py tests/api/test_multi_token.py tests/api/test_batch_invariant.py
  tests/kernels/test_vllm_kernel.py tests/kernels/test_plan.py tests/kernels/test_gluon_build.py
  tests/kernels/test_moe.py tests/kernels/test_prefill.py"
(echo "rev $(cat .ab/REV)"; timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider -n 12 -m "not interpreter" \
  --durations=10 $FILES 2>&1; echo "rc=$? $(( $(date +%s) - t0 )) s") > $OUT/gpu-suite.log
tail -n 30 $OUT/gpu-suite.log
timeout 95 python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --sweep-seconds 10 2>&1 | grep -v "^WARNING" > $OUT/moe-bench.log
echo "rc=${PIPESTATUS[0]} $(el)" >> $OUT/moe-bench.log; cp /tmp/moe/*.json $OUT/ 2>/dev/null
tail -n 30 $OUT/moe-bench.log
timeout 85 python3 docs/gpu/prefill/bench_prefill.py --out /tmp/prefill --sweep-seconds 10 2>&1 | grep -v "^WARNING" > $OUT/prefill-bench.log
echo "rc=${PIPESTATUS[0]} $(el)" >> $OUT/prefill-bench.log; cp /tmp/prefill/*.json $OUT/ 2>/dev/null
tail -n 30 $OUT/prefill-bench.log
