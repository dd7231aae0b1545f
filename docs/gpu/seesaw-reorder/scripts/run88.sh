#!/usr/bin/env bash
# main 2437a80 + pv0r-before-softmax.patch: gluon_check checks (16-bit grid, ragged, fp8), then the GPU tests' gluon cases.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
t0=$(date +%s)
git apply docs/gpu/split-widening/pv0r-before-softmax.patch && echo "applied pv0r" || { echo "apply failed"; exit 1; }
(echo "main $(cat build/REV) + pv0r-before-softmax.patch"; timeout 250 python3 scripts/gluon_check.py --skip-timing 2>&1) | tee $OUT/check-pv0r.log | tail -8
echo "t $(( $(date +%s) - t0 )) s"
(echo "main $(cat build/REV) + pv0r-before-softmax.patch"; timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k gluon 2>&1) | tee $OUT/gpu-tests-pv0r.log | tail -6
echo "t $(( $(date +%s) - t0 )) s"
