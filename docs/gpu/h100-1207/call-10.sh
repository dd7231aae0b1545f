#!/usr/bin/env bash
# Device call 10 (DEADLINE seconds; carry .whl, .ab): a decode step's one-row matmuls
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
set -u
source docs/gpu/h100-1207/common.sh
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
