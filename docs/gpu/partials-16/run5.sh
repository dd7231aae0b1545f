#!/bin/bash
# Both A/B decisions in one call (about 400 s): vec2.patch against the tree at five
# shapes on a bf16 cache and two on an fp8 one (ab_seesaw.py), then the tl stage 1's
# bf16 partials (tl-bf16.patch) at seven H=16 shapes (ab_kernels.py). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/partials-16; T=$D/vec2.patch
cat build/REV > "$OUT/rev5.txt"
t0=$(date +%s)
timeout 100 python scripts/ab_seesaw.py \
  --shapes 16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096 main vec2=$T \
  > "$OUT/ab-vec2.log" 2>&1
timeout 60 python scripts/ab_seesaw.py --cache fp8 --shapes 16x64x4096,16x128x4096 \
  main vec2=$T >> "$OUT/ab-vec2.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-vec2.log"
V=/tmp/tlb; rm -rf $V && mkdir -p $V && cp -r mla_jax $V/
(cd $V && git apply $OLDPWD/$D/tl-bf16.patch)
timeout 240 python scripts/ab_kernels.py --prev mla_jax/kernels.py --this $V/mla_jax/kernels.py \
  --stages --shapes 64x16x4096,128x16x16384,16x16x4096,16x16x16384,4x16x1024,1x16x4096,64x16x16384 \
  --out "$OUT/ab-tl-bf16.json" > "$OUT/ab-tl-bf16.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-tl-bf16.log"
