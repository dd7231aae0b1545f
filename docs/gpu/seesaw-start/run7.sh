#!/bin/bash
# One device call: finer stamps of the seesaw's start on main (stamps-fine.patch:
# stamps-pages-first.patch's thirteen points plus three in the first block's TMA
# copy: slot 13 before its expect-tx, 14 after it, 15 after the latent copies,
# before the rope copy; stamps-fine2.patch: 13 after the first block's rope copy, 14
# before the second block's expect-tx, 15 after its latent copies).
#   bash run7.sh [stamps-fine|stamps-fine2]; logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
D=docs/gpu/seesaw-start; P=${1:-stamps-fine}
cat build/REV > "$OUT/rev7.txt"
t0=$(date +%s)
timeout 120 python $D/stamps.py --patches $D/$P.patch \
  64x64x1024 16x64x4096 16x64x1024 16x32x1024 > "$OUT/$P.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/$P.log"
