#!/usr/bin/env bash
# One call on the H200 after the 16-bit 16-head kernel took 32 heads in small steps:
# test_gpu's Gluon-through-mla_decode cases at 32 heads that run it (and their
# run-time-length twins on the seesaw), then the sweep's H=32 part (B 1-64), our
# default path and vLLM's kernel in the same bench process. Logs to $OUT.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
timeout 120 python -m pytest -v -rfEs -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through_mla_decode and (16-32-1024 or 4-32-4096)" > $OUT/gpu-h32-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-h32-tests.log; tail -n 8 $OUT/gpu-h32-tests.log
part h32 170 145 --heads 32 --batch 1,4,16,64 --paths $P
