#!/usr/bin/env bash
# Device calls from the sixth lease on, one function each: `DEADLINE=S bash leases.sh N`
# (carry .whl, .ab/REV, and what each call's comment names). Each writes its logs to
# $OUT, most important first, as its comment lists.
set -u
source docs/gpu/h100-1207/common.sh
left() { echo $(( deadline - ($(date +%s) - t0) )); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
PROF=--xla_enable_command_buffers_during_profiling=true

# Call 16 (carry .whl, .ab/REV): what call 13 had no time for, on
# one tree (NEW). Logs to $OUT, most important first:
#   flags.log      step_profile.py --no-moe at B=1 under XLA_FLAGS variants: the default
#                  (command buffers kept on under the profiler, $PROF), none, the while
#                  loop in command buffers, and the projections as plain einsum with dot
#                  strength reduction off (with and without the while loop in them)
#   prefill.log    step_profile.py --prefill 4096: the 4,096-token prefill kernel by kernel
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at 1, 8 and 4096 tokens, V2-Lite's
#                  two shared experts, and the config sweep
#   batch.log      step_profile.py --no-moe at B=8 and B=64
#   hlo.tar.gz     XLA's optimized HLO of the einsum variant's B=1 decode loop
call16() {
  CB=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION
  NSR=--xla_gpu_enable_dot_strength_reduction=false
  profile() {  # label, need (s), XLA_FLAGS, step_profile's arguments
    local label=$1 need=$2 flags=$3; shift 3
    [ "$(left)" -lt "$need" ] && { echo "== $label: not run, $(left) s left"; return; }
    echo "== $label: XLA_FLAGS='$flags' $*"
    new env XLA_FLAGS="$flags" timeout 120 python3 $P "$@" 2>&1 | grep -v "^WARNING" | head -30
    el
  }
  { echo "NEW $rev"; nvidia-smi -L
    profile default 40 "$PROF" --no-moe --batch 1
    profile no-command-buffers 40 "--xla_gpu_enable_command_buffer=" --no-moe --batch 1
    profile while-in-command-buffers 40 "$PROF --xla_gpu_enable_command_buffer=$CB,WHILE,CONDITIONAL" --no-moe --batch 1
    profile einsum-no-strength-reduction 40 "$PROF $NSR --xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" --no-moe --batch 1 --einsum
    profile einsum-nsr-while 40 "$PROF $NSR --xla_gpu_enable_command_buffer=$CB,WHILE,CONDITIONAL" --no-moe --batch 1 --einsum
  } > $OUT/flags.log 2>&1
  grep -E "^==|decode step|^\[" $OUT/flags.log
  (cd /tmp/dump && tar -czf $OUT/hlo.tar.gz $(ls | grep -E "decode_loop.*after_optimizations\.txt" | head -1)) 2>&1 | tail -2
  { echo "NEW $rev"; profile prefill-4096 60 "$PROF" --prefill 4096; } > $OUT/prefill.log 2>&1
  grep -E "^==|prefill:|^\[" $OUT/prefill.log
  t=$(( $(left) - 100 )); t=$(( t > 170 ? 170 : t ))
  [ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 1 8 4096 --shared 2 \
     --sweep-seconds $(( t / 2 )) 2>&1 | grep -v "^WARNING"; echo "rc=$? $(el)") > $OUT/moe-sweep.log \
     && cp /tmp/moe/moe.json $OUT/ ; tail -n 8 $OUT/moe-sweep.log
  { echo "NEW $rev"; profile B=8 40 "$PROF" --no-moe --batch 8; profile B=64 50 "$PROF" --no-moe --batch 64; } > $OUT/batch.log 2>&1
  grep -E "^==|decode step|^\[" $OUT/batch.log
}

# Call 17 (carry .whl, .ab/base, .ab/REV): the fused MoE's prefill
# tiles at 128 x 128 (NEW) against 64 x 128 (BASE, .ab/base: the tree before), and a
# wider sweep of prefill tiles. Logs to $OUT:
#   prefill-ab.log  step_profile.py --prefill 4096, BASE then NEW (60 costliest kernels)
#   gpu-moe.log     the fused MoE's GPU tests on NEW (200 tokens take the prefill tiles)
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at 4096 tokens, its prefill sweep
#   hlo.tar.gz      XLA's optimized HLO of NEW's prefill
call17() {
  { echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L
    echo "== prefill (base)"; base env XLA_FLAGS="$PROF" timeout 120 python3 $P --prefill 4096 2>&1 | grep -v "^WARNING"; el
    echo "== prefill (new)"; new env XLA_FLAGS="$PROF --xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" \
       timeout 120 python3 $P --prefill 4096 2>&1 | grep -v "^WARNING"; el; } > $OUT/prefill-ab.log 2>&1
  grep -E "^==|prefill:|moe_|^\[" $OUT/prefill-ab.log
  (cd /tmp/dump && tar -czf $OUT/hlo.tar.gz $(ls | grep -E "_prefill.*after_optimizations\.txt" | head -1)) 2>&1 | tail -2
  (echo "rev $rev"; new timeout 120 python3 -m pytest -v -rfEs -p no:cacheprovider -n 4 --tb=short \
     -W ignore::pytest.PytestWarning tests/kernels/test_moe.py -k gpu 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-moe.log
  grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/gpu-moe.log | tail -8
  t=$(( $(left) - 10 ))
  [ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 4096 --shared 2 \
     --sweep-seconds $(( t - 40 )) 2>&1 | grep -v "^WARNING"; echo "rc=$? $(el)") > $OUT/moe-sweep.log \
     && cp /tmp/moe/moe.json $OUT/ ; tail -n 18 $OUT/moe-sweep.log
}

# Call 18 (carry .whl, .ab/base, .ab/REV): NEW's prefill changes
# (k_nope and v stored in bf16 by their matmuls, each MoE pair's output stored in bf16,
# the expert sort on 8-bit keys, no merged prefill matmuls, the router's float32 matmul
# as three bf16 ones over 64 rows, the queries' rope part passed to the attention
# kernel apart, not joined to the projection) against BASE (.ab/base:
# 9d75d21, the 128 x 128 MoE tiles), then NEW's GPU tests and NEW's model benchmark
# with transformers beside it. Logs to $OUT:
#   prefill-ab.log  step_profile.py --prefill 4096, BASE then NEW (kernels and gaps)
#   gpu-tests.log   the fused MoE's and the prefill kernel's GPU tests, the tiny V2/V3
#                   models' prefill logits and greedy tokens against transformers
#   v2-lite/        model-bench B=1, 8, 64 at context 1024 and the 4,096-token prefill,
#                   transformers' DeepseekV2ForCausalLM on the same weights beside it
call18() {
  { echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L
    echo "== prefill (base)"; base env XLA_FLAGS="$PROF" timeout 120 python3 $P --prefill 4096 2>&1 | grep -v "^WARNING"; el
    echo "== prefill (new)"; new env XLA_FLAGS="$PROF" timeout 120 python3 $P --prefill 4096 2>&1 | grep -v "^WARNING"; el
    echo "== prefill (new, no command buffers)"; new env XLA_FLAGS="--xla_gpu_enable_command_buffer=" timeout 120 python3 $P --prefill 4096 2>&1 | grep -v "^WARNING" | head -16; el
  } > $OUT/prefill-ab.log 2>&1
  grep -E "^==|prefill:|^\[" $OUT/prefill-ab.log
  (echo "rev $rev"; new timeout 150 python3 -m pytest -v -rfEs -p no:cacheprovider -n 6 --tb=short \
     -W ignore::pytest.PytestWarning tests/kernels/test_moe.py tests/kernels/test_prefill.py tests/model/test_deepseek.py \
     -k "gpu or generation or prefill_logits" 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-tests.log
  grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/gpu-tests.log | tail -8
  t=$(( $(left) - 5 ))
  [ $t -ge 120 ] && new timeout -k 10 $t python3 -m mla_jax model-bench --model v2-lite --batch 1,64,8 \
      --contexts 1024 --no-split --steps 32 --repeats 3 --prefill-len 4096 \
      --time-budget $(( t - 15 )) --out $OUT/v2-lite 2>&1 | grep -E "^(decode|prefill|model|jax|transformers|parity|torch)"
  el
}

# Call 24 (the seventh lease; carry .whl, .ab/REV, .ab/base): the decode step's
# projections through skinny_einsum (NEW) against XLA's GEMMs (BASE, .ab/base: a401cfa).
# Logs to $OUT:
#   gpu-tests.log  the tiny V2/V3 models' prefill logits and greedy tokens against
#                  transformers (the triton backend's among them), the skinny kernel's
#                  GPU test
#   v2-lite-base/, v2-lite-new/  model-bench B=1, 64, 8 at context 1024 and the
#                  4,096-token prefill, no transformers, BASE then NEW
#   profile.log    step_profile.py --no-moe at B=1 and 8 on NEW, then NEW with
#                  --xla-projections, then --projections (each projection alone)
call24() {
  (echo "rev $rev"; nvidia-smi -L; new timeout 150 python3 -m pytest -v -rfEs -p no:cacheprovider -n 6 --tb=short \
     -W ignore::pytest.PytestWarning tests/model/test_deepseek.py tests/kernels/test_skinny.py \
     -k "gpu or generation or prefill_logits" 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-tests.log
  grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/gpu-tests.log | tail -8
  for tree in base new; do
    $tree timeout -k 10 130 python3 -m mla_jax model-bench --model v2-lite --batch 1,64,8 \
      --contexts 1024 --no-torch --no-split --steps 32 --repeats 3 --prefill-len 4096 \
      --time-budget 115 --out $OUT/v2-lite-$tree 2>&1 | grep -E "^(decode|prefill|model|jax)"
    el
  done
  { echo "NEW $rev"
    for args in "--batch 1" "--batch 8" "--batch 1 --xla-projections" "--batch 8 --xla-projections"; do
      [ "$(left)" -lt 60 ] && break
      echo "== $args"; new env XLA_FLAGS="$PROF" timeout 90 python3 $P --no-moe $args 2>&1 | grep -v "^WARNING" | head -24; el
    done
    t=$(( $(left) - 5 ))
    [ $t -gt 30 ] && { echo "== --projections"; new timeout $t python3 $P --projections 2>&1 | grep -v "^WARNING"; el; }
  } > $OUT/profile.log 2>&1
  grep -E "^==|decode step|^\[" $OUT/profile.log; grep "^B=" $OUT/profile.log
}

# Call 25 (carry .whl, .ab/REV, .vllm): the Done-when numbers on one tree (NEW). Logs
# to $OUT:
#   v2-lite/     model-bench B=1, 64, 8 at context 1024 and the 4,096-token prefill,
#                transformers' DeepseekV2ForCausalLM on the same weights beside it
#   attention/   the sweep's bench at B=128, H=128 (L 4096, 16384; bf16 and the fp8
#                cache's exact path) and B=16, H=32 and 64, L=1024, vLLM's kernel beside
#   v3-stack/    model-bench --model v3-stack, decode at B=1, 8, 64
call25() {
  echo "NEW $rev"; nvidia-smi -L
  new timeout -k 10 240 python3 -m mla_jax model-bench --model v2-lite --batch 1,64,8 \
      --contexts 1024 --no-split --steps 32 --repeats 3 --prefill-len 4096 \
      --time-budget 225 --out $OUT/v2-lite 2>&1 | grep -E "^(decode|prefill|model|jax|transformers|parity|torch)"
  el
  bench() {  # name, seconds, bench arguments
    local name=$1 want=$2; shift 2
    local to=$(( want < $(left) - 5 ? want : $(left) - 5 ))
    [ $to -lt 40 ] && { echo "$name: not run, $(left) s left"; return; }
    new timeout $to python3 -m mla_jax bench "$@" --repeats 3 --out $OUT/attention/$name \
      --markdown $OUT/attention/$name.md --time-budget $(( to - 15 )) 2>&1 | tr '\r' '\n' \
      | grep -v '^bench:' > $OUT/attention/$name.log
    grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/attention/$name.log | sort -u; el
  }
  mkdir -p $OUT/attention
  bench h128 130 --batch 128 --heads 128 --lens 4096,16384 --paths triton-occupancy,triton-fp8,vllm
  bench h32-h64 60 --batch 16 --heads 32,64 --lens 1024 --paths triton-occupancy,vllm
  t=$(( $(left) - 5 ))
  [ $t -ge 60 ] && new timeout -k 10 $t python3 -m mla_jax model-bench --model v3-stack --batch 1,8,64 \
      --contexts 1024 --no-torch --no-split --steps 16 --repeats 3 --time-budget $(( t - 15 )) \
      --out $OUT/v3-stack 2>&1 | grep -E "^(decode|prefill|model|jax|layers|stack|v3)"
  el
}

call$1
