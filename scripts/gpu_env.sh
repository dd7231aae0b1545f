# Sourced at the start of every device-machine command: the carried jax-triton wheel
# and this checkout on the path, logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    TF_CPP_MIN_LOG_LEVEL=3
mkdir -p "${OUT:-/tmp/out}"
