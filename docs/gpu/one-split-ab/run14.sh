#!/usr/bin/env bash
# Checks of the one-split stage 1, the GPU tests, and an A/B of ca8b38d against this commit.
cd "$(dirname "$0")/snap"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat REV); echo "rev $rev"
t0=$(date +%s)
(echo "rev $rev"; timeout 170 python3 scripts/gluon_check.py --skip-timing 2>&1) > $OUT/gluon-check-one-split.log; tail -n 2 $OUT/gluon-check-one-split.log; grep -c FAIL $OUT/gluon-check-one-split.log
(echo "rev $rev"; timeout 120 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/gluon-fp8-h16-check-one-split.log; tail -n 2 $OUT/gluon-fp8-h16-check-one-split.log; grep -c FAIL $OUT/gluon-fp8-h16-check-one-split.log
echo "checks $(( $(date +%s) - t0 )) s"
for v in old new; do
  if [ $v = old ]; then d="$PWD/../old"; else d="$PWD"; fi
  (echo "rev $([ $v = old ] && echo ca8b38d || echo $rev)"; cd $d; PYTHONPATH="$d" timeout 150 python3 -m mla_jax bench --batch 64,128 --heads 128 --lens 4096,16384 --paths triton-occupancy,triton-fp8 --repeats 3 --out /tmp/ab-$v 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/ab-$v.log
  (cd $d; PYTHONPATH="$d" timeout 80 python3 -m mla_jax bench --batch 128 --heads 32,64 --lens 16384 --paths triton-occupancy --repeats 3 --out /tmp/ab2-$v 2>&1) | tr '\r' '\n' | grep -v '^bench:' >> $OUT/ab-$v.log
  cp /tmp/ab-$v/results.json $OUT/ab-$v.json; cp /tmp/ab2-$v/results.json $OUT/ab2-$v.json
  echo "ab $v $(( $(date +%s) - t0 )) s"
done
