#!/usr/bin/env bash
# The even-block patch alone: a second A/B against main at four fp8 shapes, then
# gluon_check --only-fp8 and the Gluon fp8 tests with it applied, then the fp8 bench
# (bf16 and fp8 caches, vLLM in the same run). Logs into $OUT.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
d=docs/gpu/fp8-widen-early; even=$d/even-widen-under-pv1l.patch
rev=$(cat build/REV 2>/dev/null || echo "?"); t0=$(date +%s)
(echo "rev $rev"; timeout 120 python3 scripts/ab_seesaw.py --cache fp8 --shapes 128x128x16384,64x128x16384,128x64x16384,16x64x4096 main even=$even 2>&1) | tee $OUT/ab-even.log
echo "t $(( $(date +%s) - t0 )) s"
git apply $even && echo "applied even" || exit 1
(echo "rev $rev + even patch"; timeout 120 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check-even.log
grep -c PASS $OUT/check-even.log; grep -E "FAIL|Error|error" $OUT/check-even.log | head; tail -n 1 $OUT/check-even.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev + even patch"; timeout 180 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon and fp8" 2>&1) > $OUT/gpu-tests-even.log; tail -n 3 $OUT/gpu-tests-even.log
echo "t $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
(echo "rev $rev + even patch"; timeout $left python3 -m mla_jax bench --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy,triton-fp8,vllm --repeats 3 --time-budget $(( left - 30 )) --out /tmp/bench-fp8 --markdown /tmp/bench-fp8/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-fp8-even.log
cp /tmp/bench-fp8/results.json $OUT/results-fp8-even.json 2>/dev/null; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-fp8-even.log | sort -u; tail -n 1 $OUT/bench-fp8-even.log
echo "t $(( $(date +%s) - t0 )) s"
