#!/bin/bash
# Prepared for the next device time (one call, about 500 s):
#   1. the Gluon tests of tests/test_gpu.py on the tree as it is (the bf16 partials
#      landed, not yet run through mla_decode on a GPU), about 250 s;
#   2. vec2.patch (a bf16 partial stored two values a thread: 4-byte stores read back
#      by ldmatrix, 350 SASS instructions fewer at 64 heads; the fp16 build unchanged)
#      against the tree at five shapes on a bf16 cache and two on an fp8 one
#      (scripts/ab_seesaw.py, both stages under CUDA graphs);
#   3. gluon_check.py --skip-timing on a copy with vec2.patch.
# If vec2 wins: git apply docs/gpu/partials-16/vec2-landing.patch (kernel + its build
# test). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/partials-16; T=$D/vec2.patch
cat build/REV > "$OUT/rev3.txt"
t0=$(date +%s)
timeout 280 python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k gluon \
  > "$OUT/gpu-tests-gluon.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests-gluon.log"
timeout 90 python scripts/ab_seesaw.py \
  --shapes 16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096 main vec2=$T \
  > "$OUT/ab-vec2.log" 2>&1
timeout 50 python scripts/ab_seesaw.py --cache fp8 --shapes 16x64x4096,16x128x4096 \
  main vec2=$T >> "$OUT/ab-vec2.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-vec2.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts $V/
(cd $V && git apply $OLDPWD/$T)
(cd $V && PYTHONPATH="$V:$V/scripts" timeout 170 python scripts/gluon_check.py --skip-timing) \
  > "$OUT/check-vec2.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-vec2.log"
