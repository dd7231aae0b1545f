#!/usr/bin/env bash
# Device call 3 (about 5 minutes): the test files that run kernels, models or tools on
# the GPU (every test marked gpu, the launch and lowering tests, and those of the
# tools and the model that pick the triton backend on a GPU), xdist workers sharing
# the GPU. The notebooks' tests are left out (their Jupyter packages are not on the GPU
# machine; CI runs them). Logs to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc-new
export PYTHONPATH="/tmp/site:$PWD" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat .ab/REV > "$OUT/rev.txt"
FILES=${FILES:-"tests/gpu/test_gpu.py tests/api/test_safety.py tests/api/test_interop.py
  tests/kernels/test_kernel_cache.py tests/kernels/test_lowering.py tests/tools/test_compare.py
  tests/tools/test_demo.py tests/model/test_deepseek.py tests/model/test_generate.py
  tests/api/test_fp8.py tests/api/test_multi_token.py tests/api/test_batch_invariant.py
  tests/kernels/test_vllm_kernel.py tests/kernels/test_plan.py tests/kernels/test_gluon_build.py"}
FILES=$(for f in $FILES; do [ -e "$f" ] && echo "$f"; done)
t0=$(date +%s)
timeout "${LIMIT:-330}" python3 -m pytest -v -rfEs -p no:cacheprovider -n "${WORKERS:-12}" \
  --durations=20 $FILES > "$OUT/gpu-suite.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-suite.log"
tail -n 30 "$OUT/gpu-suite.log"
