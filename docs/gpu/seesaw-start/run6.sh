#!/bin/bash
# One device call (prepared): the split's first two blocks both by TMA with no
# cp.async between them where both lie inside the split (tma-pair.patch; the
# compiler's async-proxy fence before the second block's copy, MEMBAR.ALL.CTA in the
# SASS, is then gone), and every block by cp.async with no descriptors made
# (no-tma.patch, an experiment: what the descriptors cost a CTA whose split holds one
# pair), against main; stamps of the first (slot 4 waiting for the page indices);
# then gluon_check's checks on a copy of the tree with it. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; T=$D/tma-pair.patch
cat build/REV > "$OUT/rev6.txt"
t0=$(date +%s)
timeout 220 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,128x128x16384 \
  main tma=$T notma=$D/no-tma.patch > "$OUT/ab-tma-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-tma-pair.log"
timeout 100 python $D/stamps.py --patches $T+$D/stamps-tma-pair.patch \
  64x64x1024 16x64x4096 16x64x1024 16x32x1024 > "$OUT/stamps-tma-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/stamps-tma-pair.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 200 python scripts/gluon_check.py --skip-timing) > "$OUT/check-tma-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-tma-pair.log"
