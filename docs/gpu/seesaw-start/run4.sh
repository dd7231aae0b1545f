#!/bin/bash
# One device call (prepared; not run in the session that wrote it): the first two
# blocks' page indices read before Q's copies (pages-first.patch), one TMA descriptor
# instead of two (one-descriptor.patch) and both, against main; then gluon_check's
# checks on a copy of the tree with both. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
P=docs/gpu/seesaw-start/pages-first.patch; D=docs/gpu/seesaw-start/one-descriptor.patch
cat build/REV > "$OUT/rev4.txt"
t0=$(date +%s)
PYTHONPATH="$PWD:$PWD/scripts" timeout 240 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,128x128x16384 \
  main pages=$P onedesc=$D both=$P+$D > "$OUT/ab-pages-desc.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-pages-desc.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$P $OLDPWD/$D)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 200 python scripts/gluon_check.py --skip-timing) > "$OUT/check-pages-desc.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-pages-desc.log"
