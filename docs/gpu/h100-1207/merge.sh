#!/usr/bin/env bash
# On the CPU, from the repo root: the five 16-bit parts of calls 1-3 (docs/benchmarks/parts/)
# into docs/benchmarks/results.json, its plots and docs/benchmarks.md. The fp8 part
# (fp8-b128-l16384.json) stays a part of its own.
set -e
P=docs/benchmarks/parts
scripts/dev python -m mla_jax bench --report-only $P/small.json $P/large-b16-b64.json \
  $P/large-b128.json $P/large-b128-h32-h128.json $P/h32.json \
  --out docs/benchmarks --markdown docs/benchmarks.md
