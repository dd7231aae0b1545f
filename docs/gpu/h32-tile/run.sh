#!/usr/bin/env bash
# One call on the H200 after 32 heads in larger steps moved to the 16-bit 16-head
# kernel at one 32-head tile: test_gpu's Gluon-through-mla_decode cases at 32 heads,
# the sweep's H=32 part and its B=128 part with H=32 and 128 (our default path and
# vLLM's kernel in the same bench process), then gluon_check's 16-bit checks. Logs to
# $OUT.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
timeout 150 python -m pytest -v -rfEs -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through_mla_decode and -32-" > $OUT/gpu-h32-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-h32-tests.log; tail -n 12 $OUT/gpu-h32-tests.log
part h32 170 145 --heads 32 --batch 1,4,16,64 --paths $P
part large-b128-h32-h128 115 95 --batch 128 --heads 32,128 --paths $P
left=$(( ${CALL_S:-560} - ($(date +%s) - t0) ))
(echo "rev $rev"; timeout $left python scripts/gluon_check.py --skip-timing --skip-fp8 2>&1 | tail -n 80; echo "rc=${PIPESTATUS[0]}") > $OUT/gluon-check-16bit.log
tail -n 4 $OUT/gluon-check-16bit.log
