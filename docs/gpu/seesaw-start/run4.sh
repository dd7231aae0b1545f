#!/bin/bash
# One device call: the first two blocks' page indices read before Q's copies
# (pages-first.patch) against main, then gluon_check's 64-head checks on a copy of the
# tree with it. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
cat build/REV > "$OUT/rev4.txt"
t0=$(date +%s)
PYTHONPATH="$PWD:$PWD/scripts" timeout 90 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096 \
  main pages=docs/gpu/seesaw-start/pages-first.patch > "$OUT/ab-pages-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-pages-first.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/docs/gpu/seesaw-start/pages-first.patch)
left=$(( 150 - ($(date +%s) - t0) ))
(cd $V && PYTHONPATH="$V:$V/scripts" timeout $left python scripts/gluon_check.py --heads 64 --skip-timing) > "$OUT/check-pages-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-pages-first.log"
