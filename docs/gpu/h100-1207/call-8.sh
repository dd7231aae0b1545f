#!/usr/bin/env bash
# Device call 8 (DEADLINE seconds, default 540; carry .whl, .ab): where a V2-Lite decode
# step's time goes at B=1 (step_profile.py), BASE (.ab/base: 8e6faa8, the tree of calls
# 6-7) against this tree (moe_align without while loops; "auto" takes the fused MoE and
# flash prefill), then call 7's model benchmark on this tree in the time left. Logs to
# $OUT:
#   step-profile.log  wall and kernel time a step, launches, the costliest kernels
#   hlo.tar           XLA's optimized HLO of this tree's decode loop and MoE layers
#   env.txt, model-bench.out, v2-lite/  as call 7's
set -u
source docs/gpu/h100-1207/common.sh
base() { (cd "$NEW/.ab/base" && PYTHONPATH="/tmp/site:$NEW/.ab/base" TRITON_CACHE_DIR=/tmp/tc-base "$@"); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
{
  echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L
  echo "== base"; base timeout 100 python3 $P --batch 1 2>&1 | grep -v "^WARNING"; el
  echo "== new"
  new env XLA_FLAGS="--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" timeout 100 python3 $P --batch 1 2>&1 | grep -v "^WARNING"
  el
} > $OUT/step-profile.log 2>&1
cat $OUT/step-profile.log
(cd /tmp/dump && tar -cf $OUT/hlo.tar $(ls | grep -E "(decode_loop|_ffn_steps).*after_optimizations\.txt" | head -8))
tar -tf $OUT/hlo.tar
MB_BUDGET=$(( deadline - ($(date +%s) - t0) - 70 )) bash docs/gpu/h100-1207/call-7.sh
