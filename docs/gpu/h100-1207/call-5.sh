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
  for tree in new old; do byte_compile $tree 1 16 1024; done
  for shape in "1 16 1024" "4 128 4096" "64 16 4096"; do
    for tree in old new; do
      left=$(( deadline - ($(date +%s) - t0) )); [ $left -lt 30 ] && { echo "stopped: $left s left"; break 2; }
      first_calls $tree $shape cold warm warm warm
    done
  done
  el
} > $OUT/first-call-pyc.log 2>&1
cat $OUT/first-call-pyc.log
