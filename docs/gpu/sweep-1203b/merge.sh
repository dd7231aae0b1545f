#!/usr/bin/env bash
# On the CPU, from the repo root: the sweep on the final tree. be45d36's parts
# (sweep.sh, sweep2.sh: logs/) but its H=32 one, which acd680a re-measured after the
# 16-bit 16-head kernel took 32 heads in small steps (../h32-small/: the other rows'
# builds are the same), and the XLA paths (xla, dense) of df8ad0c's parts, into
# docs/benchmarks/ and docs/benchmarks.md. The fp8 part (#21's fp8 rows) stays a part
# of its own, as in 72ef8a8's sweep.
set -e
NEW=docs/benchmarks/parts; OLD=docs/benchmarks/df8ad0c/parts
scripts/dev python -m mla_jax bench --report-only $NEW/small.json $NEW/large-b16-b64.json \
  $NEW/large-b128.json $NEW/large-b128-h32-h128.json $NEW/h32.json \
  $(for f in $OLD/*.json; do echo "$f:xla,dense"; done) \
  --out docs/benchmarks --markdown docs/benchmarks.md
