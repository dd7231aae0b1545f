#!/usr/bin/env bash
# Device call (about 4-6 minutes on one H100/H200; carry .whl, the jax-triton wheel):
#   1. bench_moe.py: DeepSeek-V2-Lite's routed experts (hidden 2048, 1408 an expert,
#      64 experts, top-6, bf16) at N = 1, 8, 64, 4096 tokens by the fused Triton
#      kernels and the model's two XLA paths (gathered weights, ragged_dot): error
#      against float32, device and wall time a call, the bytes floor and GB/s, then a
#      small sweep of MoEConfigs. Under 4 minutes (timeout 240).
#   2. With time left (CALL_S, default 560 s, the call's limit): the MoE tests and the
#      DeepSeek parity tests on the GPU, where backend "auto" picks the Triton MoE
#      (test_deepseek's prefill logits against transformers at 1e-4 in float32, the
#      bf16 run; test_moe's lowering tests build with the device's capability too).
# Logs to $OUT: env.txt, bench.log, moe.json, gpu-tests.log.
set -u
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/tc-moe
D=$PWD/docs/gpu/moe
{
  git log -1 --format='%H %s' 2>/dev/null || echo "(no git)"; nvidia-smi -L
  python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout 240 python3 "$D/bench_moe.py" --out "$OUT" 2>&1 | grep -v "^WARNING" | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s" | tee -a "$OUT/bench.log"
left=$(( ${CALL_S:-560} - ($(date +%s) - t0) - 15 ))
if [ $left -gt 60 ]; then
  timeout "$left" python3 -m pytest -q -rfEs -p no:cacheprovider --durations=10 \
    tests/kernels/test_moe.py tests/model/test_deepseek.py > "$OUT/gpu-tests.log" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests.log"
  tail -n 25 "$OUT/gpu-tests.log"
else
  echo "no time left for the tests (${left} s)"
fi
