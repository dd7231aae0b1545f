#!/usr/bin/env bash
# The crossover on both caches (the fp8 one decides FP8_MIN_SPLIT_TOKENS), stage 2's
# tilings where its share is largest among the open #21 rows, then the fp8 bench.
source "$(dirname "$0")/common.sh"
(echo "rev $rev"; timeout 200 python3 scripts/gluon_check.py --crossover 2>&1) > $OUT/crossover.log; cat $OUT/crossover.log
echo "crossover $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 150 python3 scripts/sweep_stage2.py --prev mla_jax/kernels.py --shapes 16x128x4096,16x64x4096,64x64x1024,64x16x4096,16x32x4096 --out $OUT/stage2.json 2>&1) > $OUT/stage2.log; cat $OUT/stage2.log | cut -c1-400
echo "stage2 $(( $(date +%s) - t0 )) s"
part fp8 150 130 --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton,triton-occupancy,triton-fp8,vllm
