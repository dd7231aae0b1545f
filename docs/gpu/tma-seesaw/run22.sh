#!/usr/bin/env bash
# The TMA seesaw (wip/global-scratch): global scratch on the GPU, its checks, the GPU
# tests, then an A/B against main in kernel time (old, new, new, old).
source "$(dirname "$0")/common.sh"
T="$PWD/../tma"
(cd $T; echo "rev $(cat REV)"; PYTHONPATH="$T:$T/scripts" timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k global_scratch 2>&1 | tail -n 5) > $OUT/tma-scratch.log; cat $OUT/tma-scratch.log
(cd $T; echo "rev $(cat REV)"; PYTHONPATH="$T:$T/scripts" timeout 150 python3 scripts/gluon_check.py --heads 128,64,32 --skip-timing 2>&1) > $OUT/tma-gluon-check.log; tail -n 2 $OUT/tma-gluon-check.log; echo "FAIL lines: $(grep -c FAIL $OUT/tma-gluon-check.log)"
echo "checks $(( $(date +%s) - t0 )) s"
ab tma-ab old,new,new,old tma --batch 16,128 --heads 128 --lens 4096,16384 --paths triton-occupancy
(cd $T; echo "rev $(cat REV)"; PYTHONPATH="$T:$T/scripts" timeout 300 python3 -m pytest -q -p no:cacheprovider -x tests/test_gpu.py tests/test_safety.py 2>&1 | tail -n 15) > $OUT/tma-gpu-tests.log; tail -n 3 $OUT/tma-gpu-tests.log
echo "done $(( $(date +%s) - t0 )) s"
