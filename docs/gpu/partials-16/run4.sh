#!/bin/bash
# Prepared for the next device time (one call, about 200 s): the tl stage 1's partials
# in bf16 too (tl-bf16.patch: its partial stores in bf16, two to a float32 slot, and
# stage 2 reading them so; 33 global stores a thread where main has 65 at 16 heads),
# against the tree at the H=16 shapes, where the tl kernel runs (64/16/4096 is the
# target at 80 µs: halving its 8.4 MB of partials, written then read back, would save
# about 2 µs of its 82.8), both stages and each alone under CUDA graphs
# (scripts/ab_kernels.py).
# Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev4.txt"
V=/tmp/tlb; rm -rf $V && mkdir -p $V && cp -r mla_jax $V/
(cd $V && git apply $OLDPWD/docs/gpu/partials-16/tl-bf16.patch)
t0=$(date +%s)
timeout 240 python scripts/ab_kernels.py --prev mla_jax/kernels.py --this $V/mla_jax/kernels.py \
  --stages --shapes 64x16x4096,128x16x16384,16x16x4096,16x16x16384,4x16x1024,1x16x4096,64x16x16384 \
  --out "$OUT/ab-tl-bf16.json" > "$OUT/ab-tl-bf16.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-tl-bf16.log"
