#!/bin/bash
# One device call: the split's first block by cp.async with Q, issued around the TMA
# descriptors (cp-split.patch: warps 1-3 issue their part of Q and the block before
# warp 0 makes the descriptors, warp 0 its part after, so that the bytes move while
# the descriptors are made and their fence waits for none of them; the second block
# by TMA as before) against main at seven shapes, then gluon_check's checks on a copy
# of the tree with it. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; T=$D/cp-split.patch
cat build/REV > "$OUT/rev9.txt"
t0=$(date +%s)
timeout 200 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,128x128x16384 \
  main cpsplit=$T > "$OUT/ab-cp-split.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cp-split.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 200 python scripts/gluon_check.py --skip-timing) > "$OUT/check-cp-split.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-cp-split.log"
