#!/usr/bin/env bash
# This project's remote GPU runs (the device tool: a bare machine without a package
# registry, a 10-minute limit a command, files returned from $OUT). Two halves:
#   scripts/device_tool.sh fetch          here: what the GPU machine cannot download, the
#                                         jax-triton wheel for its Python 3.12 (.whl/) and
#                                         vLLM's kernel file (.vllm/); carry both
#   scripts/device_tool.sh MODE [MODE..]  there: installs the carried wheel, then runs
#                                         scripts/gpu_checks.sh --out "$OUT" MODE...
# Anywhere else, run scripts/gpu_checks.sh directly.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = fetch ]; then
    mkdir -p .whl .vllm
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 -d .whl jax-triton==0.3.1
    if [ ! -f .vllm/triton_decode_attention.py ]; then
        tmp="$(mktemp -d)"
        python3 -m pip download -q --no-deps -d "$tmp" vllm==0.33.0
        unzip -j -o "$tmp"/vllm-0.33.0-*.whl \
            vllm/v1/attention/ops/triton_decode_attention.py -d .vllm/
        rm -rf "$tmp"
    fi
    ls -l .whl .vllm
    exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
# Triton's own launcher (vLLM's kernel, the torch paths) needs a writable cache dir.
mkdir -p /tmp/triton-cache
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/triton-cache \
    MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
exec scripts/gpu_checks.sh --out "${OUT:?the device tool sets OUT}" "$@"
