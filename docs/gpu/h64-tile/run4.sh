#!/usr/bin/env bash
# Call 3: test_gpu's Gluon-through-mla_decode cases at 64 and 128 heads (-k matches
# batch 64 and 128 too) on the final cases (ragged rows with full ones at each new
# shape), six xdist workers. Logs to $OUT.
WORKERS=6 LIMIT=240 bash docs/gpu/gpu-suite-1203/run.sh tests/test_gpu.py \
  -k "gluon_stage1_through_mla_decode and (-64- or -128-)"
mv $OUT/gpu-suite.log $OUT/gpu-wide-tests-3.log; tail -n 5 $OUT/gpu-wide-tests-3.log
