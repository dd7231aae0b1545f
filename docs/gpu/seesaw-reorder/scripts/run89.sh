#!/usr/bin/env bash
# main 2437a80 + pv0r-before-softmax.patch: the fp8 front-staging A/B (main/pv0r/front/early), then the bench at the seesaw's shapes with vLLM, and the fp8 bench.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); t0=$(date +%s)
(echo "rev $rev"; timeout 160 python3 build/ab_front.py 2>&1) | tee $OUT/ab-front.log
echo "t $(( $(date +%s) - t0 )) s"
git apply docs/gpu/split-widening/pv0r-before-softmax.patch && echo "applied pv0r" || { echo "apply failed"; exit 1; }
(echo "rev $rev + pv0r-before-softmax.patch"; timeout 270 python3 -m mla_jax bench --batch 16,64,128 --heads 32,64,128 --lens 1024,4096,16384 --paths triton-occupancy,vllm --repeats 3 --time-budget 230 --out /tmp/bench-pv0r --markdown /tmp/bench-pv0r/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-pv0r.log
cp /tmp/bench-pv0r/results.json $OUT/results-pv0r.json 2>/dev/null; tail -n 3 $OUT/bench-pv0r.log
echo "t $(( $(date +%s) - t0 )) s"
left=$(( 555 - ($(date +%s) - t0) ))
(echo "rev $rev + pv0r-before-softmax.patch"; timeout $left python3 -m mla_jax bench --batch 16,128 --heads 128 --lens 4096,16384 --paths triton-fp8 --repeats 3 --out /tmp/bench-fp8 --markdown /tmp/bench-fp8/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-fp8-pv0r.log
cp /tmp/bench-fp8/results.json $OUT/results-fp8-pv0r.json 2>/dev/null; tail -n 6 $OUT/bench-fp8-pv0r.log
echo "t $(( $(date +%s) - t0 )) s"
