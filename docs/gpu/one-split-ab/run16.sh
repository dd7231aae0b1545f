#!/usr/bin/env bash
# In one lease: ca8b38d and this commit alternating (old, new, new, old), then the GPU tests.
cd "$(dirname "$0")/snap"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat REV); echo "rev $rev"
t0=$(date +%s)
i=0
for v in old new new old; do
  i=$((i+1))
  if [ $v = old ]; then d="$PWD/../old"; r=ca8b38d; else d="$PWD"; r=$rev; fi
  (echo "rev $r ($v, round $i)"; cd $d; PYTHONPATH="$d" timeout 100 python3 -m mla_jax bench --batch 64,128 --heads 128 --lens 16384 --paths triton-occupancy,triton-fp8 --repeats 3 --out /tmp/abl-$i 2>&1 | tr '\r' '\n' | grep -v '^bench:'; PYTHONPATH="$d" timeout 60 python3 -m mla_jax bench --batch 128 --heads 128 --lens 4096 --paths triton-occupancy --repeats 3 --out /tmp/abs-$i 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/ab-lease-$i-$v.log
  cp /tmp/abl-$i/results.json $OUT/ab-lease-$i-$v.json; cp /tmp/abs-$i/results.json $OUT/ab-lease-$i-$v-4096.json
  grep -E "^ +(64|128) +128" $OUT/ab-lease-$i-$v.log
  echo "round $i $v $(( $(date +%s) - t0 )) s"
done
export PYTHONPATH="$PWD:$PWD/scripts"
(echo "rev $rev"; timeout 330 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_safety.py 2>&1) > $OUT/gpu-tests.log; tail -n 4 $OUT/gpu-tests.log
echo "tests $(( $(date +%s) - t0 )) s"
