#!/usr/bin/env bash
# Device call (about 4-6 minutes on one H100/H200; carry .whl, the jax-triton wheel):
#   1. bench_prefill.py: MLA prefill attention (q 192 = 128 + 64 rope, k_pe shared by
#      the heads, v 128, bf16) at DeepSeek-V2-Lite's 16 heads (T=4096, B=1 and 4) and
#      V3's 128 heads (T=4096, B=1): the Triton flash kernel (mla_jax.prefill), today's
#      dense XLA path, cuDNN's fused attention (jax.nn.dot_product_attention; refused
#      shapes reported) and the layer's attention from the latent rows on both
#      backends: device and wall time a call, TFLOP/s against the causal flops (and
#      against a measured bf16 matmul and the spec peak), outputs against the dense
#      path; a ragged batch; then a small sweep of PrefillConfigs. Under 4 minutes
#      (timeout 240).
#   2. With time left (CALL_S, default 560 s, the call's limit): tests/kernels/test_prefill.py
#      on the GPU but its interpreter tests (the kernel and the layer's
#      backend="triton" against float64 and the dense path, built for the device; the
#      sm_90 build checks) and test_moe.py's model lowering test.
# Logs to $OUT: env.txt, bench.log, prefill.json, gpu-tests.log.
set -u
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/tc-prefill
D=$PWD/docs/gpu/prefill
{
  git log -1 --format='%H %s' 2>/dev/null || echo "(no git)"; nvidia-smi -L
  python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 240 python3 "$D/bench_prefill.py" --out "$OUT" 2>&1 | grep -v "^WARNING" | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s" | tee -a "$OUT/bench.log"
left=$(( ${CALL_S:-560} - ($(date +%s) - t0) - 15 ))
if [ $left -gt 60 ]; then
  timeout "$left" python3 -m pytest -q -rfEs -p no:cacheprovider --durations=10 \
    -m "not interpreter" tests/kernels/test_prefill.py "tests/kernels/test_moe.py::test_model_on_the_triton_backend_lowers_for_cuda" \
    > "$OUT/gpu-tests.log" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests.log"
  tail -n 25 "$OUT/gpu-tests.log"
else
  echo "no time left for the tests (${left} s)"
fi
