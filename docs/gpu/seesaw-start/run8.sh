#!/bin/bash
# One device call: a change to the seesaw's start against main at seven shapes, then
# gluon_check's checks on a copy of the tree with it. Logs to $OUT.
#   bash run8.sh q-split    Q's copies split around the TMA descriptors: warps 1-3
#                           issue their part of Q before warp 0 makes them, warp 0
#                           its part after, so that their fence waits for none of Q.
#   bash run8.sh cp-split   the same, with the split's first block by cp.async beside
#                           Q, so that its bytes move while the descriptors are made
#                           (the second block by TMA as before).
#   FP8=1 bash run8.sh prologue-loop
#                           the first two blocks copied by one loop the compiler
#                           cannot unroll (120 SASS instructions fewer in the 16-bit
#                           builds); FP8=1 adds an A/B on the fp8 cache at three
#                           shapes.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; P=${1:-q-split}; T=$D/$P.patch
cat build/REV > "$OUT/rev8.txt"
t0=$(date +%s)
timeout 200 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,128x128x16384 \
  main "${P//-/}=$T" > "$OUT/ab-$P.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-$P.log"
if [ "${FP8:-0}" = 1 ]; then
  timeout 100 python scripts/ab_seesaw.py --cache fp8 \
    --shapes 16x64x4096,16x128x4096,128x128x16384 \
    main "${P//-/}=$T" > "$OUT/ab-$P-fp8.log" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-$P-fp8.log"
fi
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 200 python scripts/gluon_check.py --skip-timing) > "$OUT/check-$P.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-$P.log"
