#!/usr/bin/env bash
# The sweep's missing 128/32/16384, then wip/fp8-one-split-count's kernels: fp8 GPU tests, gluon_check, fp8 bench.
source "$(dirname "$0")/common.sh"
part h32-b128-l16384 80 70 --batch 128 --heads 32 --lens 16384
cp ../wip/mla_jax/_gluon_kernels.py mla_jax/_gluon_kernels.py; rev="$rev+wip"
(echo "rev $rev"; timeout 110 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py -k fp8 2>&1) > $OUT/gpu-tests-fp8-wip.log; tail -n 3 $OUT/gpu-tests-fp8-wip.log
echo "tests $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 90 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1; echo "rev $rev"; timeout 80 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/gluon-check-fp8-wip.log; grep -iE "pass|fail" $OUT/gluon-check-fp8-wip.log | tail -n 4; echo "FAIL lines: $(grep -c FAIL $OUT/gluon-check-fp8-wip.log)"
echo "check $(( $(date +%s) - t0 )) s"
part fp8-wip 100 90 --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton,triton-occupancy,triton-fp8,vllm
