#!/usr/bin/env bash
# Device calls of this folder, one function each: `DEADLINE=S bash leases.sh N`, with
# the carried paths each call's comment names. Each writes its logs to $OUT, most
# important first, as its comment lists. Calls 1-18 ran as the files call-N.sh and
# lease-6.sh, as the logs name them; call 7 is still its own file (call-7.sh, which
# call 9 ran again); calls 11, 12, 14, 15 and 19-23 were one-liners, in README.md.
set -u
source docs/gpu/h100-1207/common.sh
left() { echo $(( deadline - ($(date +%s) - t0) )); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
PROF=--xla_enable_command_buffers_during_profiling=true

# Call 1 (call-1.sh; about 9.5 minutes; carry .whl, .vllm, .ab): this tree (NEW) against
# .ab/old (OLD: 30be8da, the kernels launched by mla_jax's own g++-built FFI handler),
# side by side, then the sweep's part `small`. Logs to $OUT:
#   check.log       every stage 1, bf16 and fp8, by both trees: bitwise equal, float64
#   first-call.log  every module byte-compiled first (is the bytecode read?), then the
#                   first mla_decode in new processes, cold and warm, both trees; where
#                   a warm one spends its time (first_call.py --phases, both trees), and
#                   the backend's costliest imports (NEW, -X importtime)
#   chain.log       20-call chains at B=1, both trees (NEW also with command buffers off)
#   bench-{old,new}.{log,json}  the bench at 12 shapes by each tree (device time)
#   sweep-1.tar     the part small: B 1 and 4 at H 16, 64, 128
call1() {
D=$NEW/docs/gpu/h100-1207
{
  echo "NEW $rev  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  new python3 -c 'import sys, jax, jaxlib, triton, jax_triton, numpy; print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "triton", triton.__version__, "jax-triton", jax_triton.__version__, "numpy", numpy.__version__)'
  echo "== NEW"; new timeout 150 python3 $D/check.py run /tmp/new.npz 2>&1 | grep -v "^WARNING"
  echo "== OLD"; old timeout 150 python3 $D/check.py run /tmp/old.npz 2>&1 | grep -v "^WARNING"
  echo "== compare (A = OLD, B = NEW)"; new timeout 60 python3 $D/check.py compare /tmp/old.npz /tmp/new.npz
  el
} > $OUT/check.log 2>&1
cat $OUT/check.log
{
  env | grep -E "^PYTHON"
  python3 -m compileall -q -j 8 "$NEW/mla_jax" "$NEW/scripts" "$OLD/mla_jax" "$OLD/scripts" /tmp/site >/dev/null; echo "compileall rc=$?"
  for tree in new old; do
    $tree python3 -v -c "import mla_jax._triton_backend" > /tmp/v.txt 2>&1
    echo "$tree: modules read from bytecode $(grep -c 'pyc matches' /tmp/v.txt), compiled from source $(grep -c 'code object from .*\.py$' /tmp/v.txt)"
  done
  for shape in "4 128 4096" "64 16 4096" "1 16 1024"; do
    set -- $shape
    for tree in old new; do
      for i in cold warm warm warm; do
        echo -n "$tree $i: "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 | grep "first mla_decode"
      done
      for i in 1 2; do
        echo -n "$tree warm, "
        $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$1-$2-$3 timeout 60 python3 $NEW/scripts/first_call.py --phases --batch $1 --heads $2 --max-len $3 2>&1 | grep "phases"
      done
    done
  done
  echo "== NEW, the backend's imports over 10 ms (-X importtime: self us | cumulative us | module), warm"
  new env TRITON_CACHE_DIR=/tmp/fc-new-1-16-1024 python3 -X importtime scripts/first_call.py --batch 1 --heads 16 --max-len 1024 2>&1 \
    | grep "import time" | awk -F'|' '$2+0 > 10000' | tail -25
  el
} > $OUT/first-call.log 2>&1
cat $OUT/first-call.log
{
  echo "== OLD"; old timeout 60 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  for flags in "" "--xla_gpu_enable_command_buffer="; do
    echo "== NEW, XLA_FLAGS='$flags'"; new env XLA_FLAGS="$flags" timeout 60 python3 $D/chain.py triton_kernel_call_ffi 2>&1 | grep -v "^WARNING"
  done
  echo "== OLD again"; old timeout 60 python3 $D/chain.py mla_jax_cubin_launch 2>&1 | grep -v "^WARNING"
  el
} > $OUT/chain.log 2>&1
cat $OUT/chain.log
ARGS="--batch 1,64,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy --repeats 3 --time-budget 50"
for tree in old new; do
  (echo "$tree"; $tree timeout 90 python3 -m mla_jax bench $ARGS --out /tmp/b-$tree --markdown /tmp/b-$tree.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$tree.log
  cp /tmp/b-$tree/results.json $OUT/bench-$tree.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ |wrote" $OUT/bench-$tree.log
done
el
part small 200 --batch 1,4 --heads 16,64,128
pack sweep-1
el
}

# Call 2 (call-2.sh; about 9.5 minutes; carry .whl, .vllm, .ab): the GPU test files, then the
# sweep's parts large-b128-h32-h128 and large-b128 (B=128 at H 16, 32, 64, 128).
# Logs to $OUT: gpu-suite.log, sweep-2.tar.
call2() {
suite 330
part large-b128-h32-h128 110 --batch 128 --heads 32,128
part large-b128 100 --batch 128 --heads 16,64
pack sweep-2
el
}

# Call 3 (call-3.sh; about 9.5 minutes; carry .whl, .vllm, .ab): the sweep's parts
# large-b16-b64 (B 16 and 64 at H 16, 64, 128) and h32 (H=32, B 1-64), then the fp8
# rows (B=128, L=16384, H 16 and 128: the bf16 cache, the fp8 cache by the default and
# the fp8-MMA path, and vLLM) as time allows. Logs to $OUT: sweep-3.tar.
call3() {
part large-b16-b64 230 --batch 16,64 --heads 16,64,128
part h32 150 --batch 1,4,16,64 --heads 32
left=$(( deadline - ($(date +%s) - t0) ))
if [ $left -ge 60 ]; then
  (echo "rev $rev"; new timeout $left python3 -m mla_jax bench --batch 128 --heads 16,128 --lens 16384 \
     --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm --repeats 3 --out /tmp/b-fp8 \
     --markdown /tmp/b-fp8.md --time-budget $(( left - 20 )) 2>&1 | tr '\r' '\n' | grep -v '^bench:') \
     > /tmp/parts/bench-fp8-b128-l16384.log
  cp /tmp/b-fp8/results.json /tmp/parts/fp8-b128-l16384.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " /tmp/parts/bench-fp8-b128-l16384.log | sort -u
fi
pack sweep-3
el
}

# Call 4 (call-4.sh; 8 minutes; carry .whl, .vllm, .ab): the GPU test files again, every test
# named as it ends (call 2's quiet run stopped at its limit before naming its failures).
# Log: gpu-suite.log. Ran as one command line on 2026-12-07; this is that line, spread out.
call4() {
files=()
for f in tests/*/test_*.py; do
  case "$f" in
  tests/tools/test_notebooks.py | tests/api/test_fuzz.py | tests/kernels/test_gluon_build.py \
    | tests/kernels/test_kernel_build.py) ;;
  *) files+=("$f") ;;
  esac
done
(echo "rev $rev"; nvidia-smi -L; new timeout 480 python3 -m pytest -v -rfEs -p no:cacheprovider -n 12 \
   -m "not interpreter" --tb=short --durations=15 -W ignore::pytest.PytestWarning "${files[@]}" 2>&1 \
   | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-suite.log
grep -E "FAILED|ERROR|passed|failed" $OUT/gpu-suite.log | tail -30
}

# Call 5 (call-5.sh; about 3 minutes; carry .whl, .vllm, .ab): the test files that failed in
# call 4's suite, rerun after their fix (gpu-rerun.log), then the first mla_decode with
# every module the call imports byte-compiled, the device machine's own packages too
# (PYTHONPYCACHEPREFIX: its site-packages are read-only and ship no bytecode), both
# trees (first-call-pyc.log).
call5() {
(echo "rev $rev"; new timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider -n 12 --tb=short \
   -W ignore::pytest.PytestWarning tests/api/test_errors.py tests/kernels/test_prefill.py \
   tests/tools/test_model_bench.py tests/tools/test_cli.py 2>&1 | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-rerun.log
tail -n 25 $OUT/gpu-rerun.log
export PYTHONPYCACHEPREFIX=/tmp/pyc
{
  echo "PYTHONPYCACHEPREFIX=$PYTHONPYCACHEPREFIX"
  for tree in new old; do byte_compile $tree 1 16 1024; done
  for shape in "1 16 1024" "4 128 4096" "64 16 4096"; do
    for tree in old new; do
      left=$(( deadline - ($(date +%s) - t0) )); [ $left -lt 30 ] && { echo "stopped: $left s left"; break 2; }
      first_calls $tree $shape cold warm warm warm
    done
  done
  el
} > $OUT/first-call-pyc.log 2>&1
cat $OUT/first-call-pyc.log
}

# Call 6 (call-6.sh; about 6 minutes; carry .whl, .vllm, .ab): a second lease, NEW against
# OLD again. Logs to $OUT:
#   ab-64-128-16384.log  the one shape call 1 measured outside ±2%: six bench processes
#                        per tree, alternating (OLD first in odd pairs, NEW first in
#                        even), each its own compile and 5 repeats of the profiler's time
#   first-call-lazy.log  call 5's first-call measurement (every imported module
#                        byte-compiled) on this tree, whose plan imports a Gluon family's
#                        module only when it plans that family, against OLD
#   gpu-model.log        the DeepSeek tests that check generation against transformers,
#                        the one with backend="triton" (flash prefill, fused MoE,
#                        mla_decode) among them
call6() {
{
  echo "NEW $rev  OLD $(cat .ab/old/REV)"; nvidia-smi -L
  for i in 1 2 3 4 5 6; do
    if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for tree in $order; do
      echo -n "pair $i $tree: "
      $tree timeout 60 python3 -m mla_jax bench --batch 64 --heads 128 --lens 16384 \
        --paths triton-occupancy --repeats 5 --out /tmp/ab-$tree-$i --markdown /tmp/ab-$tree-$i.md 2>&1 \
        | tr '\r' '\n' | grep -E "^ +64 +128 +16384 "
    done
  done
  el
} > $OUT/ab-64-128-16384.log 2>&1
cat $OUT/ab-64-128-16384.log
export PYTHONPYCACHEPREFIX=/tmp/pyc
{
  echo "NEW $rev  OLD $(cat .ab/old/REV)  PYTHONPYCACHEPREFIX=$PYTHONPYCACHEPREFIX"
  for tree in new old; do byte_compile $tree 64 16 4096; done
  for shape in "64 16 4096" "4 128 4096" "1 16 1024"; do
    for tree in old new; do first_calls $tree $shape cold warm warm warm warm; done
  done
  el
} > $OUT/first-call-lazy.log 2>&1
cat $OUT/first-call-lazy.log
unset PYTHONPYCACHEPREFIX
left=$(( deadline - ($(date +%s) - t0) ))
(echo "rev $rev"; nvidia-smi -L; new timeout $left python3 -m pytest -v -rfEs -p no:cacheprovider -n 3 --tb=short \
   -W ignore::pytest.PytestWarning tests/model/test_deepseek.py -k "generation or prefill_logits" 2>&1 \
   | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-model.log
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/gpu-model.log | tail -20
}

# Call 8 (call-8.sh; DEADLINE seconds; carry .whl, .ab): where a V2-Lite decode step's time
# goes (step_profile.py) at B=1, then B=8 as time allows, BASE (.ab/base: 8e6faa8, the
# tree of calls 6-7) against this tree (moe_align without while loops, and one token's
# pairs aligned without a sort). Logs to $OUT:
#   step-profile.log  wall and kernel time a step, launches, the costliest kernels
#   hlo.tar           XLA's optimized HLO of this tree's decode loop and MoE layers, B=1
call8() {
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
}

# Call 10 (call-10.sh; DEADLINE seconds; carry .whl, .ab): a decode step's one-row matmuls
# kept GEMMs (`mla_jax.layer.project`, NEW) against BASE (.ab/base: the tree before it,
# with the one-token moe_align), then the model benchmark, the GPU generation tests and
# the fused MoE's config sweep on NEW, each as time allows. Logs to $OUT, most important
# first:
#   step-profile.log     step_profile.py at B=1: BASE, NEW (B=8 last, as time allows)
#   hlo.tar              XLA's optimized HLO of NEW's decode loop and MoE layers, B=1
#   v2-lite/             model-bench's results.json and model-bench.log (call 7's flags
#                        with 200 s left; else B=1 and 8 without transformers)
#   gpu-model.log        the DeepSeek tests that check generation against transformers
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at 1, 8 and 4096 tokens
call10() {
left() { echo $(( deadline - ($(date +%s) - t0) )); }
P=$NEW/docs/gpu/h100-1207/step_profile.py
profile() {  # B, then the trees
  local b=$1; shift
  for tree in "$@"; do
    [ "$(left)" -lt 60 ] && { echo "B=$b $tree: not run, $(left) s left"; continue; }
    echo "== $tree"
    if [ $tree = new ] && [ $b = 1 ]; then
      new env XLA_FLAGS="--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text" timeout $(( $(left) - 5 )) python3 $P --batch $b 2>&1 | grep -v "^WARNING"
    else
      $tree timeout $(( $(left) - 5 )) python3 $P --batch $b 2>&1 | grep -v "^WARNING"
    fi
    el
  done
}
{ echo "NEW $rev  BASE $(cat .ab/base/REV)"; nvidia-smi -L; profile 1 base new; } > $OUT/step-profile.log 2>&1
cat $OUT/step-profile.log
(cd /tmp/dump && tar -cf $OUT/hlo.tar $(ls | grep -E "(decode_loop|_ffn_steps).*after_optimizations\.txt" | head -8)) 2>&1 | tail -2
t=$(( $(left) < 300 ? $(left) : 300 ))
if [ $t -ge 200 ]; then  # call 7's run
  flags="--batch 1,64,8 --contexts 4096,1024 --time-budget $(( t - 40 ))"
else  # what fits: no transformers, no prefill split
  flags="--batch 1,8 --contexts 1024,4096 --no-torch --time-budget $(( t - 25 ))"
fi
[ $t -ge 70 ] && new timeout -k 15 $t python3 -m mla_jax model-bench --model v2-lite $flags \
    --steps 32 --repeats 3 --prefill-len 4096 --out $OUT/v2-lite 2>&1 \
    | grep --line-buffered -v "^WARNING: All log messages" | grep -v "Writing model shards"
rm -f $OUT/v2-lite/model-bench.md; el
t=$(( $(left) < 120 ? $(left) : 120 ))
[ $t -ge 90 ] && (echo "rev $rev"; new timeout $t python3 -m pytest -v -rfEs -p no:cacheprovider -n 3 --tb=short \
   -W ignore::pytest.PytestWarning tests/model/test_deepseek.py -k "generation or prefill_logits" 2>&1 \
   | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-model.log
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/gpu-model.log | tail -12
t=$(( $(left) - 10 ))
[ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 1 8 4096 \
   --sweep-seconds $(( t / 2 - 20 )) 2>&1 | grep -v "^WARNING"; echo "rc=$? $(el)") > $OUT/moe-sweep.log \
   && cp /tmp/moe/moe.json $OUT/ ; tail -n 25 $OUT/moe-sweep.log
{ profile 8 base new; } >> $OUT/step-profile.log 2>&1; tail -n 4 $OUT/step-profile.log
}

# Call 13 (call-13.sh; fifth lease; carry .whl, .ab/base, .ab/REV): the shared experts in
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
call13() {
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
}

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

# Call 25 (the eighth lease, on b1-launches a66ac02; carry .whl, .ab/REV, .vllm): the
# Done-when numbers on one tree (NEW), the least measured first, each part only where
# time is left for it. Logs to $OUT:
#   layer.log    step_profile.py --no-moe --batch 1 --layer: the B=1 step's costliest
#                kernels and one layer's launches in order, each with the idle before it
#   v3-stack/    model-bench --model v3-stack, decode at B=1, 8, 64
#   v2-lite/     model-bench B=1, 64, 8 at context 1024 and the 4,096-token prefill,
#                transformers' DeepseekV2ForCausalLM on the same weights beside it
#   attention.tar  common.sh's sweep parts h128 (B=128, H=128, L 4096 and 16384; bf16
#                and the fp8 cache's exact path) and h32-h64 (B=16, H=32 and 64,
#                L=1024), vLLM's kernel beside
call25() {
  echo "NEW $rev"; nvidia-smi -L
  new env XLA_FLAGS="$PROF" timeout 90 python3 $P --no-moe --batch 1 --layer 2>&1 \
    | grep -v "^WARNING" > $OUT/layer.log; grep -E "decode step|one layer:" $OUT/layer.log; el
  t=$(( $(left) - 5 )); t=$(( t > 150 ? 150 : t ))
  new timeout -k 10 $t python3 -m mla_jax model-bench --model v3-stack --batch 1,8,64 \
      --contexts 1024 --no-torch --no-split --steps 16 --repeats 3 --time-budget $(( t - 15 )) \
      --out $OUT/v3-stack 2>&1 | grep -E "^(decode|model|jax|skipped)"
  el
  t=$(( $(left) - 5 )); t=$(( t > 250 ? 250 : t ))
  [ $t -ge 200 ] && new timeout -k 10 $t python3 -m mla_jax model-bench --model v2-lite --batch 1,64,8 \
      --contexts 1024 --no-split --steps 32 --repeats 3 --prefill-len 4096 \
      --time-budget $(( t - 15 )) --out $OUT/v2-lite 2>&1 | grep -E "^(decode|prefill|model|jax|transformers|parity|torch|skipped)"
  el
  BENCH_PATHS=triton-occupancy,triton-fp8,vllm part h128 120 --batch 128 --heads 128 --lens 4096,16384
  part h32-h64 60 --batch 16 --heads 32,64 --lens 1024
  pack attention
}

# Call 26 (the eighth lease, before call 25): the batch-one launches (NEW: the branch
# b1-launches checked out, ead492e's zero row applied again and the MoE's one-token
# path, 581 launches a B=1 step by scripts/step_kernels.py) against main (BASE,
# .ab/base: git archive of main, 763); carry .whl, .ab/REV, .ab/base. Logs to $OUT:
#   gpu-tests.log  fused_moe on the GPU against float64 (one token among them, with
#                  and without the shared experts), then the tiny V2/V3 models' prefill
#                  logits and greedy tokens against transformers, the triton backend's
#                  among them (NEW)
#   v2-lite-base/, v2-lite-new/  model-bench B=1, 8 at context 1024, no transformers
#   layer.log      step_profile.py --no-moe --batch 1 --layer, BASE then NEW
call26() {
  (echo "rev $rev"; nvidia-smi -L; new timeout 150 python3 -m pytest -v -rfEs -p no:cacheprovider -n 6 --tb=short \
     -W ignore::pytest.PytestWarning tests/kernels/test_moe.py::test_fused_moe_on_the_gpu_matches_float64 \
     tests/model/test_deepseek.py -k "gpu or generation or prefill_logits" 2>&1 \
     | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-tests.log
  grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/gpu-tests.log | tail -4
  for tree in base new; do
    $tree timeout -k 10 100 python3 -m mla_jax model-bench --model v2-lite --batch 1,8 \
      --contexts 1024 --no-torch --no-split --steps 32 --repeats 5 --prefill-len 512 \
      --time-budget 85 --out $OUT/v2-lite-$tree 2>&1 | grep -E "^(decode|model)"
    el
  done
  { echo "NEW $rev  BASE $(cat .ab/base/REV)"
    for tree in base new; do
      [ "$(left)" -lt 50 ] && break
      echo "== $tree"; $tree env XLA_FLAGS="$PROF" timeout 90 python3 $P --no-moe --batch 1 --layer 2>&1 \
        | grep -v "^WARNING"; el
    done
  } > $OUT/layer.log 2>&1
  grep -E "^==|decode step|one layer:" $OUT/layer.log
}

# The A/B calls' parts from call 27 on (calls 27, 29 and 30 run them with their own sizes):
#   gpu_tests LIMIT WORKERS FILTER FILES...  pytest -k FILTER on NEW into gpu-tests.log
#   model_ab BATCHES KILL LIMIT BUDGET       model-bench of V2-Lite at context 1024, no
#                                            transformers, BASE then NEW (v2-lite-TREE/)
#   layer_profile                            step_profile.py --no-moe --batch 1 --layer on
#                                            NEW into layer.log
gpu_tests() {
  local limit=$1 workers=$2 filter=$3; shift 3
  (echo "rev $rev"; nvidia-smi -L; new timeout $limit python3 -m pytest -v -rfEs -p no:cacheprovider -n $workers --tb=short \
     -W ignore::pytest.PytestWarning "$@" -k "$filter" 2>&1 \
     | grep -v "PytestBenchmarkWarning\|warner("; echo "rc=$? $(el)") > $OUT/gpu-tests.log
  grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/gpu-tests.log | tail -4
}
model_ab() {
  local batches=$1 kill=$2 limit=$3 budget=$4 tree
  for tree in base new; do
    $tree timeout -k $kill $limit python3 -m mla_jax model-bench --model v2-lite --batch $batches \
      --contexts 1024 --no-torch --no-split --steps 32 --repeats 5 --prefill-len 512 \
      --time-budget $budget --out $OUT/v2-lite-$tree 2>&1 | grep -E "^(decode|model)"
    el
  done
}
layer_profile() {
  { echo "NEW $rev  BASE $(cat .ab/base/REV)"
    new env XLA_FLAGS="$PROF" timeout 90 python3 $P --no-moe --batch 1 --layer 2>&1 | grep -v "^WARNING"
    el
  } > $OUT/layer.log 2>&1
  grep -E "decode step|one layer:" $OUT/layer.log
}

# Call 27 (the ninth lease; carry .whl, .ab/REV, .ab/base): the dense MLP on one token
# through the MoE's kernels (NEW: the branch dense-mlp at edc7be5, now on main:
# fused_mlp; 579 launches a B=1 step by scripts/step_kernels.py) against main (BASE,
# .ab/base: git archive of main b3d677a; 581). Logs to $OUT:
#   gpu-tests.log  fused_mlp and fused_moe on the GPU against float64, then the tiny
#                  V2/V3 models' prefill logits and greedy tokens against transformers,
#                  the triton backend's one prompt at a time among them (NEW)
#   v2-lite-base/, v2-lite-new/  model-bench B=1, 8 at context 1024, no transformers
#   layer.log      step_profile.py --no-moe --batch 1 --layer, NEW
#   moe-sweep.log, moe.json  docs/gpu/moe/bench_moe.py at one token with V2-Lite's two
#                  shared experts, the decode sweep
call27() {
  gpu_tests 150 6 "gpu or generation or prefill_logits" tests/kernels/test_moe.py tests/model/test_deepseek.py
  model_ab 1,8 10 100 85
  layer_profile
  t=$(( $(left) - 5 ))
  [ $t -gt 60 ] && (echo "rev $rev"; new timeout $t python3 docs/gpu/moe/bench_moe.py --out /tmp/moe --tokens 1 \
      --shared 2 --sweep-seconds $(( t - 40 )) 2>&1 | grep -v "^WARNING"; el) > $OUT/moe-sweep.log
  cp /tmp/moe/moe.json $OUT/ 2>/dev/null; tail -3 $OUT/moe-sweep.log
}

# Call 28 (the ninth lease, after call 27; carry .whl, .ab/REV, .vllm): the GPU test files
# on NEW (common.sh's suite). Log: gpu-suite.log
call28() {
  suite 520
}

# Call 29 (planned, not run: refused starts took the device time; call 30 is the same cut
# to 300 device seconds; carry .whl, .ab/REV, .ab/base): the branch b1-next checked out
# (NEW: one token's MoE config from call 27's sweep, fused_mlp's aligned parts and
# mla_decode's padding rows; 526 launches a B=1 step by scripts/step_kernels.py)
# against main (BASE, .ab/base: git archive of main, call 27's NEW; 579). Logs to $OUT:
#   gpu-tests.log  fused_mlp and fused_moe on the GPU against float64, the padding rows
#                  unread, then the tiny V2/V3 models' prefill logits and greedy tokens
#                  against transformers, the triton backend's one prompt at a time
#                  among them (NEW)
#   v2-lite-base/, v2-lite-new/  model-bench B=1, 8 at context 1024, no transformers
#   layer.log      step_profile.py --no-moe --batch 1 --layer, NEW
#   moe.log        docs/gpu/moe/bench_moe.py at 1 and 8 tokens with V2-Lite's two shared
#                  experts, the default configs (BASE, then NEW)
#   v2-lite-no-pdl/  model-bench B=1 on NEW with XLA_FLAGS=--xla_gpu_enable_pdl=false
call29() {
  gpu_tests 150 6 "fused or padding or generation or prefill_logits or batch_one" \
    tests/kernels/test_moe.py tests/model/test_deepseek.py tests/gpu/test_gpu.py
  model_ab 1,8 10 100 85
  layer_profile
  { for tree in base new; do
      [ "$(left)" -lt 65 ] && break
      echo "== $tree"; $tree timeout 60 python3 $NEW/docs/gpu/moe/bench_moe.py --out /tmp/moe-$tree --tokens 1 8 \
        --shared 2 --sweep-seconds 0 2>&1 | grep -E "^N=|summary"; el
    done
  } > $OUT/moe.log 2>&1
  cat $OUT/moe.log
  # What PDL gives the step: XLA's kernels wait on griddepcontrol by default
  # (xla_gpu_enable_pdl), the Triton calls do not; NEW with it off, where time is left.
  [ "$(left)" -gt 50 ] && new env XLA_FLAGS=--xla_gpu_enable_pdl=false timeout -k 5 45 python3 -m mla_jax \
      model-bench --model v2-lite --batch 1 --contexts 1024 --no-torch --no-split --steps 32 \
      --repeats 5 --prefill-len 512 --time-budget 38 --out $OUT/v2-lite-no-pdl 2>&1 | grep -E "^(decode|model)"
}

# Call 30 (planned, not run; carry .whl, .ab/REV, .ab/base): call 29 cut to what 300
# device seconds hold: NEW against BASE as in call 29.
# Logs to $OUT:
#   gpu-tests.log  fused_mlp on the GPU against float64, the padding rows unread, the
#                  batch-one step against the public layers and the tiny models'
#                  batch-one generation on the triton backend against transformers (NEW)
#   v2-lite-base/, v2-lite-new/  model-bench B=1 at context 1024, no transformers
call30() {
  gpu_tests 100 8 "fused_mlp_on or padding or batch_one or triton_backend_matches" \
    tests/kernels/test_moe.py tests/model/test_deepseek.py tests/gpu/test_gpu.py
  model_ab 1 5 45 38
}

call$1
