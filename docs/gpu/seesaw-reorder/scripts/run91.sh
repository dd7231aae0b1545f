#!/usr/bin/env bash
# main as committed (the seesaw reorder and fp8 staging landed): gluon_check at 32 and 48 heads (masked tiles), then the rest of the GPU suite (test_gpu without the Gluon cases, test_safety).
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); t0=$(date +%s)
(echo "rev $rev"; timeout 80 python3 scripts/gluon_check.py --heads 32,48 --skip-timing 2>&1) > $OUT/check-h32-h48.log
grep -c PASS $OUT/check-h32-h48.log; grep -E "FAIL|Error|error" $OUT/check-h32-h48.log | head; tail -n 1 $OUT/check-h32-h48.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout $(( 265 - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py -k "not gluon" 2>&1) > $OUT/gpu-tests-rest.log; tail -n 3 $OUT/gpu-tests-rest.log
echo "t $(( $(date +%s) - t0 )) s"
