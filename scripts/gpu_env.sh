# Sourced at the start of every device-machine command: the carried jax-triton wheel
# and this checkout on the path, logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
# Triton's own launcher (vLLM's kernel, torch paths) needs a writable cache dir.
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    TF_CPP_MIN_LOG_LEVEL=3 TRITON_CACHE_DIR=/tmp/triton-cache \
    MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
mkdir -p "${OUT:-/tmp/out}" /tmp/triton-cache
