#!/usr/bin/env bash
# Device call 5 (about 3 minutes; carry .whl, .vllm, .ab): the test files that failed in
# call 4's suite, rerun after their fix (gpu-rerun.log), then the first mla_decode with
# every module the call imports byte-compiled, the device machine's own packages too
# (PYTHONPYCACHEPREFIX: its site-packages are read-only and ship no bytecode), both
# trees (first-call-pyc.log).
set -u
source docs/gpu/h100-1207/common.sh
(echo "rev $rev"; new timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider -n 12 --tb=short \
   -W ignore::pytest.PytestWarning tests/api/test_errors.py tests/kernels/test_prefill.py \
   tests/tools/test_model_bench.py tests/tools/test_cli.py 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-rerun.log
tail -n 25 $OUT/gpu-rerun.log
export PYTHONPYCACHEPREFIX=/tmp/pyc
{
  echo "PYTHONPYCACHEPREFIX=$PYTHONPYCACHEPREFIX"
  for tree in new old; do
    $tree env TRITON_CACHE_DIR=/tmp/fc-$tree python3 -v $NEW/scripts/first_call.py --batch 1 --heads 16 --max-len 1024 2>&1 \
      | sed -nE "s/^# code object from '?([^']*\.py)'?$/\1/p; s/^# .*\.pyc matches (.*\.py)$/\1/p" > /tmp/src-$tree.txt
    sort -u /tmp/src-$tree.txt | xargs python3 -m compileall -q -j 16 > /dev/null 2>&1
    $tree python3 -v -c "import mla_jax._triton_backend" > /tmp/v.txt 2>&1
    echo "$tree: $(sort -u /tmp/src-$tree.txt | wc -l) files compiled; a new process reads $(grep -c 'pyc matches' /tmp/v.txt) from bytecode, compiles $(grep -c 'code object from .*\.py' /tmp/v.txt) from source"
  done
  for shape in "1 16 1024" "4 128 4096" "64 16 4096"; do
    set -- $shape
    for tree in old new; do
      left=$(( deadline - ($(date +%s) - t0) )); [ $left -lt 30 ] && { echo "stopped: $left s left"; break 2; }
      for i in cold warm warm warm; do
        echo -n "$tree $i: "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 $NEW/scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
      echo -n "$tree warm, "
      $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 $NEW/scripts/first_call.py --phases --batch $1 --heads $2 --max-len $3 2>&1 | grep "phases"
    done
  done
  el
} > $OUT/first-call-pyc.log 2>&1
cat $OUT/first-call-pyc.log
