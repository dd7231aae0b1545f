#!/usr/bin/env bash
# Call 1 on the H200 after 64 heads (up to 16384 tokens) and 128 (up to 4096) moved to
# the 16-bit 16-head kernel at 32-head tiles: test_gpu's Gluon-through-mla_decode cases
# at 64 and 128 heads (-k matches batch 64 and 128 too), the sweep's `small` part (B 1
# and 4 at H 16, 64, 128: our default path and vLLM's kernel in the same bench process),
# then gluon_check's 16-bit checks. Logs to $OUT.
P=triton-occupancy,vllm
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
timeout 150 python -m pytest -v -rfEs -p no:cacheprovider tests/test_gpu.py \
  -k "gluon_stage1_through_mla_decode and (-64- or -128-)" > $OUT/gpu-wide-tests.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/gpu-wide-tests.log; tail -n 8 $OUT/gpu-wide-tests.log
part small 200 180 --batch 1,4 --heads 16,64,128 --paths $P
left=$(( ${CALL_S:-570} - ($(date +%s) - t0) ))
(echo "rev $rev"; timeout $left python scripts/gluon_check.py --skip-timing --skip-fp8 2>&1 | tail -n 80; echo "rc=${PIPESTATUS[0]}") > $OUT/gluon-check-16bit.log
tail -n 4 $OUT/gluon-check-16bit.log
