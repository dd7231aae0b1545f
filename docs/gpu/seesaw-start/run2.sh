#!/bin/bash
# One device call: the first two blocks by cp.async before Q and the TMA descriptors
# (cp-first.patch, on top of ../store-loop/store-loop.patch) against main and the store
# loop alone; then, on a copy of the tree with both patches, gluon_check's checks
# (16-bit grid, ragged rows, fp8; float64 reference), the bench beside vLLM at the
# small seesaw shapes, and the Gluon cases of the GPU tests while time is left.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
L=docs/gpu/store-loop/store-loop.patch; C=docs/gpu/seesaw-start/cp-first.patch
cat build/REV > "$OUT/rev2.txt"
t0=$(date +%s)
PYTHONPATH="$PWD:$PWD/scripts" timeout 200 python scripts/ab_seesaw.py \
  --shapes 64x64x1024,16x64x4096,16x64x1024,16x32x1024,16x128x4096,64x64x4096,128x128x16384 \
  main loop=$L cpfirst=$L+$C > "$OUT/ab-cp-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cp-first.log"
V=/tmp/v; rm -rf $V && mkdir $V && cp -r mla_jax scripts tests pyproject.toml $V/
(cd $V && git apply $OLDPWD/$L $OLDPWD/$C)
export PYTHONPATH="$V:$V/scripts"
(cd $V && timeout 170 python scripts/gluon_check.py --skip-timing) > "$OUT/check-cp-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/check-cp-first.log"
(cd $V && timeout 100 python3 -m mla_jax bench --batch 16 --heads 32,64 --lens 1024,4096 \
  --paths triton-occupancy,vllm --repeats 3 --out /tmp/bench-s \
  --markdown /tmp/bench-s/benchmarks.md --time-budget 85 2>&1 | tr '\r' '\n' \
  | grep -v '^bench:') > "$OUT/bench-cp-first.log"
cp /tmp/bench-s/results.json "$OUT/bench-cp-first.json"
echo "bench $(( $(date +%s) - t0 )) s" >> "$OUT/bench-cp-first.log"
left=$(( 560 - ($(date +%s) - t0) ))
(cd $V && timeout $left python -m pytest -q -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through and not fp8") > "$OUT/gpu-tests-cp-first.log" 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/gpu-tests-cp-first.log"
