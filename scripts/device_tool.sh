#!/usr/bin/env bash
# This project's remote GPU runs (the device tool: a bare machine without a package
# registry, a 10-minute limit a command, files returned from $OUT). Two halves:
#   scripts/device_tool.sh fetch          here: what the GPU machine cannot download,
#                                         vLLM's kernel file (.vllm/); carry it
#   scripts/device_tool.sh MODE [MODE..]  there: runs scripts/gpu_checks.sh --out "$OUT"
#                                         MODE... (the machine has jax[cuda12], triton
#                                         and torch)
# Anywhere else, run scripts/gpu_checks.sh directly.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = fetch ]; then
    mkdir -p .vllm
    if [ ! -f .vllm/triton_decode_attention.py ]; then
        tmp="$(mktemp -d)"
        python3 -m pip download -q --no-deps -d "$tmp" vllm==0.33.0
        unzip -j -o "$tmp"/vllm-0.33.0-*.whl \
            vllm/v1/attention/ops/triton_decode_attention.py -d .vllm/
        rm -rf "$tmp"
    fi
    ls -l .vllm
    exit 0
fi
# Triton's own launcher (vLLM's kernel, the torch paths) and our kernel cache need a
# writable cache dir.
mkdir -p /tmp/triton-cache
export PYTHONPATH="$PWD" TRITON_CACHE_DIR=/tmp/triton-cache \
    MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
exec scripts/gpu_checks.sh --out "${OUT:?the device tool sets OUT}" "$@"
