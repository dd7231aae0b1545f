#!/usr/bin/env bash
# The fp8 seesaw's even block widened under P1 V1_L and slot 1's refill under P1 V1_R:
# the A/B (main, each patch, both), then gluon_check --only-fp8 and the Gluon fp8 tests
# with both applied. Logs into $OUT.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
d=docs/gpu/fp8-widen-early; even=$d/even-widen-under-pv1l.patch; odd=$d/odd-refill-under-pv1r.patch
rev=$(cat build/REV 2>/dev/null || echo "?"); t0=$(date +%s)
(echo "rev $rev"; timeout 200 python3 scripts/ab_seesaw.py --cache fp8 --shapes 128x128x16384,16x128x4096,64x64x4096 \
  main even=$even odd=$odd both=$even+$odd 2>&1) | tee $OUT/ab-widen-early.log
echo "t $(( $(date +%s) - t0 )) s"
git apply $even && git apply $odd && echo "applied both" || exit 1
(echo "rev $rev + both patches"; timeout 150 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check-both.log
grep -c PASS $OUT/check-both.log; grep -E "FAIL|Error|error" $OUT/check-both.log | head; tail -n 1 $OUT/check-both.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev + both patches"; timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon and fp8" 2>&1) > $OUT/gpu-tests-both.log; tail -n 3 $OUT/gpu-tests-both.log
echo "t $(( $(date +%s) - t0 )) s"
