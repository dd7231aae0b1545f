#!/usr/bin/env bash
# Device call 8 (DEADLINE seconds; carry .whl, .ab): where a V2-Lite decode step's time
# goes (step_profile.py) at B=1, then B=8 as time allows, BASE (.ab/base: 8e6faa8, the
# tree of calls 6-7) against this tree (moe_align without while loops, and one token's
# pairs aligned without a sort). Logs to $OUT:
#   step-profile.log  wall and kernel time a step, launches, the costliest kernels
#   hlo.tar           XLA's optimized HLO of this tree's decode loop and MoE layers, B=1
set -u
source docs/gpu/h100-1207/common.sh
P=$NEW/docs/gpu/h100-1207/step_profile.py
{
  echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L
  for b in 1 8; do
    for tree in base new; do
      left=$(( deadline - ($(date +%s) - t0) )); [ $left -lt 75 ] && { echo "stopped: $left s left"; break 2; }
      echo "== $tree"
      if [ $tree = new ] && [ $b = 1 ]; then
        new env XLA_FLAGS="--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" timeout $((left - 5)) python3 $P --batch $b 2>&1 | grep -v "^WARNING"
      else
        $tree timeout $((left - 5)) python3 $P --batch $b 2>&1 | grep -v "^WARNING"
      fi
      el
    done
  done
} > $OUT/step-profile.log 2>&1
cat $OUT/step-profile.log
(cd /tmp/dump && tar -cf $OUT/hlo.tar $(ls | grep -E "(decode_loop|_ffn_steps).*after_optimizations\.txt" | head -8)) 2>&1 | tail -2
