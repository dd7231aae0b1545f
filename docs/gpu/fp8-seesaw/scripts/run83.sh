#!/usr/bin/env bash
# The fp8 seesaw as built: gluon_check --only-fp8, the fp8 crossover, test_gpu -k fp8, the fp8 bench with vLLM.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); echo "rev $rev"; t0=$(date +%s)
(echo "rev $rev"; timeout 150 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check.log
grep -c PASS $OUT/check.log; grep -E "FAIL|Error|error" $OUT/check.log | head -20; tail -n 1 $OUT/check.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 170 python3 -m mla_jax bench --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton,triton-occupancy,triton-fp8,vllm --repeats 3 --out /tmp/bench-fp8 --markdown /tmp/bench-fp8/benchmarks.md 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-fp8.log
cp /tmp/bench-fp8/results.json $OUT/results.json 2>/dev/null; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-fp8.log | sort -u; tail -n 1 $OUT/bench-fp8.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k fp8 2>&1) > $OUT/gpu-tests-fp8.log; tail -n 3 $OUT/gpu-tests-fp8.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 100 python3 build/crossover_fp8.py 2>&1) | tee $OUT/crossover-fp8.log
echo "t $(( $(date +%s) - t0 )) s"
