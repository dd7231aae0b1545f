#!/usr/bin/env bash
# Device call 2 (about 7 minutes): the whole test suite on this tree, every file of
# tests/ but the notebooks' (their Jupyter packages are not on the GPU machine; CI
# runs them), xdist workers sharing the GPU. Logs to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc-new
export PYTHONPATH="/tmp/site:$PWD" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat .ab/REV > "$OUT/rev.txt"
t0=$(date +%s)
timeout "${LIMIT:-400}" python3 -m pytest -v -rfEs -p no:cacheprovider -n "${WORKERS:-12}" \
  --durations=20 --ignore=tests/test_notebooks.py tests > "$OUT/gpu-suite.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-suite.log"
tail -n 30 "$OUT/gpu-suite.log"
