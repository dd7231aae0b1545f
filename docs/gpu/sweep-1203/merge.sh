#!/usr/bin/env bash
# On the CPU, from the repo root: the new parts (docs/benchmarks/parts/) and the XLA
# paths (xla, dense) of df8ad0c's parts (docs/benchmarks/df8ad0c/parts/; their code has
# not changed) into docs/benchmarks/ and docs/benchmarks.md (bench --report-only unions
# disjoint paths; FILE:PATHS takes only those paths of a part).
set -e
NEW=docs/benchmarks/parts; OLD=docs/benchmarks/df8ad0c/parts
scripts/dev python -m mla_jax bench --report-only $NEW/small.json $NEW/large-b16-b64.json \
  $NEW/large-b128.json $NEW/large-b128-h32-h128.json $NEW/h32.json \
  $(for f in $OLD/*.json; do echo "$f:xla,dense"; done) \
  --out docs/benchmarks --markdown docs/benchmarks.md
