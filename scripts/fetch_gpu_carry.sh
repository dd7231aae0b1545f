#!/usr/bin/env bash
# Fetches, on this machine, what the GPU machine cannot: the jax-triton wheel for its
# Python 3.12 (.whl/) and vLLM's kernel file (.vllm/, docs/vllm_kernel.md). Both are
# git-ignored; name them in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl .vllm
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d .whl jax-triton==0.3.1
if [ ! -f .vllm/triton_decode_attention.py ]; then
    tmp="$(mktemp -d)"
    python3 -m pip download -q --no-deps -d "$tmp" vllm==0.33.0
    unzip -j -o "$tmp"/vllm-0.33.0-*.whl vllm/v1/attention/ops/triton_decode_attention.py -d .vllm/
    rm -rf "$tmp"
fi
ls -l .whl .vllm
