#!/bin/bash
# One device call (prepared): the split's first two blocks copied by one loop that the
# compiler cannot unroll (prologue-loop.patch: 120 SASS instructions fewer in the
# 16-bit builds, one copy of the block copy's code instead of two) against main, on
# the 16-bit cache at seven shapes and on the fp8 cache at three; then gluon_check's
# checks on a copy of the tree with it. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; T=$D/prologue-loop.patch
cat build/REV > "$OUT/rev11.txt"
t0=$(date +%s)
timeout 150 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,128x128x16384 \
  main loop=$T > "$OUT/ab-prologue-loop.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-prologue-loop.log"
timeout 100 python scripts/ab_seesaw.py --cache fp8 \
  --shapes 16x64x4096,16x128x4096,128x128x16384 \
  main loop=$T > "$OUT/ab-prologue-loop-fp8.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-prologue-loop-fp8.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 200 python scripts/gluon_check.py --skip-timing) > "$OUT/check-prologue-loop.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-prologue-loop.log"
