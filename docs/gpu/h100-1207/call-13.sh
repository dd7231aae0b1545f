#!/usr/bin/env bash
# Device call 13 (fifth lease; carry .whl, .ab/base, .ab/REV): the shared experts in
# the fused MoE kernels (NEW) against BASE (.ab/base: the tree before, the shared MLP
# its own matmuls), what XLA's options do to NEW's B=1 step, and the fused MoE's
# config sweep. Logs to $OUT, most important first:
#   step-ab.log     step_profile.py --no-moe at B=1, BASE then NEW (B=8 last, as time allows)
#   gpu-moe.log     the fused MoE's GPU tests and the generation tests against transformers
#   v2-lite/        NEW's model benchmark, B=1, 8, 64 at context 1024 (no transformers)
#   flags.log       step_profile.py --no-moe at B=1 on NEW under each XLA_FLAGS variant
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at 1, 8 and 4096 tokens, V2-Lite's 2 shared experts
#   hlo.tar         XLA's optimized HLO of NEW's B=1 decode loop
# Every profile keeps XLA's command buffers on under the profiler ($PROF), so its
# kernel table is the timed run's.
set -u
source docs/gpu/h100-1207/common.sh
left() { echo $(( deadline - ($(date +%s) - t0) )); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
PROF=--xla_enable_command_buffers_during_profiling=true
CB=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION
profile() {  # tree, label, need (s), XLA_FLAGS, step_profile's arguments
  local tree=$1 label=$2 need=$3 flags=$4; shift 4
  [ "$(left)" -lt "$need" ] && { echo "== $label: not run, $(left) s left"; return; }
  echo "== $label ($tree): XLA_FLAGS='$flags' $*"
  $tree env XLA_FLAGS="$flags" timeout 90 python3 $P --no-moe "$@" 2>&1 | grep -v "^WARNING" | head -26
  el
}
{ echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L
  profile base B=1 60 "$PROF" --batch 1
  profile new B=1 60 "$PROF --xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" --batch 1; } > $OUT/step-ab.log 2>&1
(cd /tmp/dump && tar -cf $OUT/hlo.tar $(ls | grep -E "decode_loop.*after_optimizations\.txt" | head -2)) 2>&1 | tail -2
grep -E "^==|decode step|^\[" $OUT/step-ab.log
t=$(( $(left) < 150 ? $(left) : 150 ))
[ $t -ge 60 ] && (echo "rev $rev"; new timeout $t python3 -m pytest -v -rfEs -p no:cacheprovider -n 4 --tb=short \
   -W ignore::pytest.PytestWarning tests/kernels/test_moe.py tests/model/test_deepseek.py \
   -k "gpu or generation or prefill_logits" 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-moe.log
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/gpu-moe.log | tail -14
t=$(( $(left) < 110 ? $(left) : 110 ))
[ $t -ge 80 ] && new timeout -k 10 $t python3 -m mla_jax model-bench --model v2-lite --batch 1,8,64 \
    --contexts 1024 --no-torch --no-split --steps 32 --repeats 3 --prefill-len 4096 \
    --time-budget $(( t - 15 )) --out $OUT/v2-lite 2>&1 | grep -E "^(decode|prefill|model|jax)"
rm -f $OUT/v2-lite/model-bench.md; el
{ echo "rev $rev"
  profile new no-command-buffers 200 "--xla_gpu_enable_command_buffer=" --batch 1
  profile new while-in-command-buffers 170 "$PROF --xla_gpu_enable_command_buffer=$CB,WHILE,CONDITIONAL" --batch 1
  profile new einsum-no-strength-reduction 140 "$PROF --xla_gpu_enable_dot_strength_reduction=false" --batch 1 --einsum
} > $OUT/flags.log 2>&1
grep -E "^==|decode step|^\[" $OUT/flags.log
t=$(( $(left) - 10 ))
[ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 1 8 4096 --shared 2 \
   --sweep-seconds $(( t / 2 )) 2>&1 | grep -v "^WARNING"; echo "rc=$? $(el)") > $OUT/moe-sweep.log \
   && cp /tmp/moe/moe.json $OUT/ ; tail -n 8 $OUT/moe-sweep.log
{ profile base B=8 40 "$PROF" --batch 8; profile new B=8 40 "$PROF" --batch 8; } >> $OUT/step-ab.log 2>&1
tail -n 3 $OUT/step-ab.log
