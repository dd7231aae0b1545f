#!/bin/bash
# One device call: the whole test suite on the H200 (tests/, every file), xdist
# workers sharing the GPU where pytest-xdist is installed. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
cat build/REV > "$OUT/rev.txt"
{ nvidia-smi --query-gpu=name --format=csv,noheader; python -c "import jax, triton, torch, numpy; print('jax', jax.__version__, 'triton', triton.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"; } > "$OUT/env.txt" 2>&1
if python -c "import xdist" 2>/dev/null; then N=(-n "${WORKERS:-6}"); else N=(); fi
echo "workers: ${N[*]:-none}" >> "$OUT/env.txt"
t0=$(date +%s)
timeout "${LIMIT:-540}" python -m pytest -v -rfEs -p no:cacheprovider "${N[@]}" --durations=20 "${@:-tests}" \
  > "$OUT/gpu-suite.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-suite.log"
