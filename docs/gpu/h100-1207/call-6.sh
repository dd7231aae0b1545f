#!/usr/bin/env bash
# Device call 6 (about 6 minutes; carry .whl, .vllm, .ab): a second lease, NEW against
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
set -u
source docs/gpu/h100-1207/common.sh
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
