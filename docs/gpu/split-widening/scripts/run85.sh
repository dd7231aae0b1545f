#!/usr/bin/env bash
# Split widening: gluon_check --only-fp8 --skip-timing, the A/B against main's seesaw, the fp8 routing A/B (90edc31 vs main), test_gpu's Gluon fp8 cases.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); echo "rev $rev"; t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(echo "rev $rev"; timeout 120 python3 scripts/gluon_check.py --only-fp8 --skip-timing 2>&1) > $OUT/check.log
grep -c PASS $OUT/check.log; grep -E "FAIL|Error|error" $OUT/check.log | head -20; tail -n 1 $OUT/check.log
echo "t $(( $(date +%s) - t0 )) s"
(echo "rev $rev"; timeout 160 python3 build/ab_split.py 2>&1) | tee $OUT/ab.log
echo "t $(( $(date +%s) - t0 )) s"
i=0
for v in old new new old; do
  i=$((i+1)); d=$PWD/build/snap; [ $v = new ] && d=$PWD/build/new
  echo "== round $i: $v ($(cat $d/REV))" >> $OUT/route-ab.log
  (cd $d; PYTHONPATH="$d" timeout 50 python3 -m mla_jax bench --batch 1,4,16 --heads 128 --lens 1024,4096 --paths triton-fp8 --repeats 3 --out /tmp/r-$i 2>&1 | tr '\r' '\n' | grep -v '^bench:') >> $OUT/route-ab.log
  python3 -c "import json; d=json.load(open('/tmp/r-$i/results.json')); [print('  $v', s['B'], s['H'], s['L'], p, round(v['device_ms'], 4), list(v['kernels_per_call'])[0]) for s in d['shapes'] for p, v in s['paths'].items() if 'device_ms' in v]" | tee -a $OUT/route-ab-kernel.log
  echo "t $(( $(date +%s) - t0 )) s"
done
left=$(( 585 - ($(date +%s) - t0) ))
(echo "rev $rev"; timeout $left python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon_stage1 and fp8" 2>&1) > $OUT/gpu-tests-fp8.log; tail -n 3 $OUT/gpu-tests-fp8.log
echo "t $(( $(date +%s) - t0 )) s"
