#!/usr/bin/env bash
# FP8_MIN_SPLIT_TOKENS 1024 -> 512: the GPU suite on it, then A/B against main through
# mla_decode on the fp8 cache (kernel time), rounds old/new/new/old.
source "$(dirname "$0")/common.sh"
F="$PWD/../fp8r"
(cd $F; echo "rev $(cat REV)"; PYTHONPATH="$F:$F/scripts" timeout 340 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_safety.py 2>&1 | tail -n 15) > $OUT/fp8r-gpu-tests.log; tail -n 3 $OUT/fp8r-gpu-tests.log
echo "tests $(( $(date +%s) - t0 )) s"
ab fp8r-ab old,new,new,old fp8r --batch 16,64 --heads 64,128 --lens 1024,4096 --paths triton-fp8
echo "done $(( $(date +%s) - t0 )) s"
