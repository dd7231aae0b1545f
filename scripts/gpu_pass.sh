#!/usr/bin/env bash
# The whole GPU verification in three device-tool calls (each under its 10 minutes),
# logs under $OUT: commit them under docs/gpu/ and docs/benchmarks/.
#   scripts/gpu_pass.sh tests    the test suite on the GPU
#   scripts/gpu_pass.sh extras   compare tables (with vLLM), the demo, step timing, fp8 bench
#   scripts/gpu_pass.sh bench    the full benchmark sweep against vLLM and XLA
# Carry .whl (jax-triton wheel) and .vllm (docs/vllm_kernel.md).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
case "${1:-tests}" in
tests)
    # The interpreter tests skip themselves (numpy >= 2.4 there); notebooks need nbclient.
    timeout 540 python3 -m pytest -q -p no:cacheprovider -rs --ignore=tests/test_notebooks.py \
        tests 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
    ;;
extras)
    for heads in 16 128; do
        timeout 60 python3 -m mla_jax compare --batch 8 --heads "$heads" --max-len 8192 \
            --page-size 64 --dtype bfloat16 2>&1 | tee -a "$OUT/compare_h200.txt"
    done
    timeout 60 python3 -m mla_jax demo --backend triton 2>&1 | tee "$OUT/demo_h200.log" | tail -12
    timeout 90 python3 scripts/step_timing.py --out "$OUT/step_timing.json" 2>&1 \
        | tee "$OUT/step_timing.log" | tail -9
    timeout 200 python3 -m mla_jax bench --paths triton,triton-occupancy,triton-fp8 \
        --batch 128 --heads 16,128 --lens 16384 --out "$OUT/fp8" 2>&1 \
        | tr '\r' '\n' | grep -v '^bench:' | tee "$OUT/fp8_bench.log" | tail -8
    ;;
bench)
    timeout 560 python3 -m mla_jax bench --out "$OUT/benchmarks" --time-budget 480 2>&1 \
        | tr '\r' '\n' | grep -v '^bench:' | tee "$OUT/bench.log" | tail -45
    ;;
*) echo "usage: scripts/gpu_pass.sh {tests|extras|bench}" >&2; exit 2 ;;
esac
