#!/usr/bin/env bash
# Device call 7 (one GPU; about 6 minutes, stopped at 8.3 by `timeout`; carry .whl): the
# model benchmark of DeepSeek-V2-Lite's shapes (27 layers, random bf16 weights, the
# triton backend), with transformers' DeepseekV2ForCausalLM on the same weights beside
# it. Logs and results to $OUT:
#   env.txt              the card and the versions
#   model-bench.out      the run's output as it went
#   v2-lite/             results.json, model-bench.md (the tables), model-bench.log
# Order (most important first): the JAX phase decodes B=1, 64, 8 at context 4096, then
# at 1024 (32 steps a call, median of 3 calls), prefills one 4096-token prompt, then
# times the step's parts; the torch phase checks parity (the tiny V3 and V2 models
# through triton) and runs transformers at the same B and contexts in the same order.
# --time-budget 440: the JAX phase starts nothing after 65% of it (286 s), the torch
# phase nothing after 440 s; what was skipped is listed in the results.
# Time (the earlier script's H200 log, in git at 3ead84f: docs/gpu/deepseek-parity-throughput.log: a first
# decode call 12-16 s, a 4096-token prefill 1.0 s; its 155 s model build is now one
# jitted init per layer shape): JAX phase about 3.5 min (6 decode compiles, 6 attention
# and 3 MoE/dense/rest split compiles, the prefill), torch phase about 2.5 min (imports,
# parity, building the model, 6 generate calls).
set -u
: "${OUT:?OUT must name the folder for the logs}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR=/tmp/triton-model-bench
{
  echo "REV $(git rev-parse --short HEAD 2>/dev/null || cat .ab/REV 2>/dev/null || echo '?')"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c 'import sys, jax, jax_triton; print(sys.version.split()[0], "jax", jax.__version__, "jax-triton", jax_triton.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout -k 15 500 python3 -m mla_jax model-bench --model v2-lite --batch 1,64,8 \
    --contexts 4096,1024 --steps 32 --repeats 3 --prefill-len 4096 --time-budget 440 \
    --out "$OUT/v2-lite" 2>&1 | grep --line-buffered -v "^WARNING: All log messages" \
    | tee "$OUT/model-bench.out"
echo "model-bench exit status ${PIPESTATUS[0]}" | tee -a "$OUT/model-bench.out"
