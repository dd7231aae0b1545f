#!/usr/bin/env bash
# main 2437a80 + pv0r + fp8-front-staging + fp8-front-staging-early: gluon_check --only-fp8 checks, test_gpu's gluon fp8 cases.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); t0=$(date +%s)
for p in pv0r-before-softmax fp8-front-staging fp8-front-staging-early; do git apply docs/gpu/split-widening/$p.patch && echo "applied $p" || exit 1; done
(echo "rev $rev + pv0r, front, early patches"; timeout 200 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check-early.log
grep -c PASS $OUT/check-early.log; grep -E "FAIL|Error|error" $OUT/check-early.log | head; tail -n 1 $OUT/check-early.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev + pv0r, front, early patches"; timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon and fp8" 2>&1) > $OUT/gpu-tests-early.log; tail -n 3 $OUT/gpu-tests-early.log
echo "t $(( $(date +%s) - t0 )) s"
left=$(( 555 - ($(date +%s) - t0) ))
(echo "rev $rev + pv0r, front, early patches"; timeout $(( left * 2 / 5 )) python3 -m mla_jax bench --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton-occupancy,triton-fp8,vllm --repeats 3 --time-budget $(( left * 2 / 5 - 30 )) --out /tmp/bench-fp8 --markdown /tmp/bench-fp8/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-fp8-early.log
cp /tmp/bench-fp8/results.json $OUT/results-fp8-early.json 2>/dev/null; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-fp8-early.log | sort -u; tail -n 1 $OUT/bench-fp8-early.log
echo "t $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
(echo "rev $rev + pv0r, front, early patches (16-bit kernels: pv0r)"; timeout $left python3 -m mla_jax bench --batch 1,4 --heads 32,64,128 --lens 1024,4096,16384,65536 --paths triton-occupancy,vllm --repeats 3 --time-budget $(( left - 40 )) --out /tmp/bench-small --markdown /tmp/bench-small/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-small-pv0r.log
cp /tmp/bench-small/results.json $OUT/results-small-pv0r.json 2>/dev/null; tail -n 2 $OUT/bench-small-pv0r.log
echo "t $(( $(date +%s) - t0 )) s"
