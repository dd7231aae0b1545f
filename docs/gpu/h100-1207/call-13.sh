#!/usr/bin/env bash
# Device call 13 (fifth lease; carry .whl): what XLA's options do to a B=1 decode step,
# the fused MoE's config sweep, and where a B=8 step goes. Logs to $OUT:
#   flags.log       step_profile.py --no-moe at B=1 under each XLA_FLAGS variant below
#                   (command buffers kept on under the profiler, so its kernel table is
#                   the timed run's)
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at 1, 8 and 4096 tokens
#   step-profile.log         step_profile.py at B=8
set -u
source docs/gpu/h100-1207/common.sh
left() { echo $(( deadline - ($(date +%s) - t0) )); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
PROF=--xla_enable_command_buffers_during_profiling=true
CB=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION
variant() {  # label, XLA_FLAGS, step_profile's extra arguments
  local label=$1 flags=$2; shift 2
  [ "$(left)" -lt 300 ] && { echo "== $label: not run, $(left) s left"; return; }
  echo "== $label: XLA_FLAGS='$flags' $*"
  new env XLA_FLAGS="$flags" timeout 90 python3 $P --batch 1 --no-moe "$@" 2>&1 | grep -v "^WARNING" | head -24
  el
}
{ echo "rev $rev"; nvidia-smi -L
  variant default "$PROF"
  variant no-command-buffers "--xla_gpu_enable_command_buffer="
  variant while-in-command-buffers "$PROF --xla_gpu_enable_command_buffer=$CB,WHILE,CONDITIONAL"
  variant einsum-no-strength-reduction "$PROF --xla_gpu_enable_dot_strength_reduction=false" --einsum
  variant einsum-no-strength-reduction-while "$PROF --xla_gpu_enable_dot_strength_reduction=false --xla_gpu_enable_command_buffer=$CB,WHILE,CONDITIONAL" --einsum
} > $OUT/flags.log 2>&1
grep -E "^==|decode step|^\[" $OUT/flags.log
t=$(( $(left) - 70 ))
[ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 1 8 4096 \
   --sweep-seconds $(( t / 2 )) 2>&1 | grep -v "^WARNING"; echo "rc=$? $(el)") > $OUT/moe-sweep.log \
   && cp /tmp/moe/moe.json $OUT/ ; tail -n 8 $OUT/moe-sweep.log
{ echo "rev $rev"; XLA_FLAGS=$PROF new timeout $(( $(left) - 3 )) python3 $P --batch 8 2>&1 | grep -v "^WARNING"; el; } > $OUT/step-profile.log
head -5 $OUT/step-profile.log
