#!/bin/bash
# One device call: the first block by cp.async around the TMA descriptors only where
# a split is one pair (cp-split-one-pair.patch; longer splits keep main's start)
# against main, then on a copy of the tree with it gluon_check's checks and the Gluon
# tests of tests/test_gpu.py (with TESTS=1; about 250 s more). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; T=$D/cp-split-one-pair.patch
cat build/REV > "$OUT/rev10.txt"
t0=$(date +%s)
timeout 150 python scripts/ab_seesaw.py \
  --shapes 16x32x1024,16x64x1024,8x32x1024,4x64x1024,64x64x1024,16x64x4096,16x128x4096,64x64x4096 \
  main onepair=$T > "$OUT/ab-cp-split-one-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cp-split-one-pair.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts tests pyproject.toml $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 160 python scripts/gluon_check.py --skip-timing) > "$OUT/check-cp-split-one-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-cp-split-one-pair.log"
[ "${TESTS:-0}" = 1 ] || exit 0
(cd $V && PYTHONPATH="$V" timeout 260 python -m pytest -q -p no:cacheprovider -x tests/test_gpu.py -k gluon) > "$OUT/tests-cp-split-one-pair.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/tests-cp-split-one-pair.log"
