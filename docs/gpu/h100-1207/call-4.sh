#!/usr/bin/env bash
# Device call 4 (8 minutes; carry .whl, .vllm, .ab): the GPU test files again, every test
# named as it ends (call 2's quiet run stopped at its limit before naming its failures).
# Log: gpu-suite.log. Ran as one command line on 2026-12-07; this is that line, spread out.
source docs/gpu/h100-1207/common.sh >/dev/null 2>&1
files=()
for f in tests/*/test_*.py; do
  case "$f" in
  tests/tools/test_notebooks.py | tests/api/test_fuzz.py | tests/kernels/test_gluon_build.py \
    | tests/kernels/test_kernel_build.py) ;;
  *) files+=("$f") ;;
  esac
done
(echo "rev $rev"; nvidia-smi -L; new timeout 480 python3 -m pytest -v -rfEs -p no:cacheprovider -n 12 \
   -m "not interpreter" --tb=short --durations=15 -W ignore::pytest.PytestWarning "${files[@]}" 2>&1 \
   | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-suite.log
grep -E "FAILED|ERROR|passed|failed" $OUT/gpu-suite.log | tail -30
