#!/usr/bin/env bash
# Sweep part 3 of 3: H=32 at every batch, 128/128, and the fp8 bench.
source "$(dirname "$0")/common.sh"
part h32 300 280 --heads 32
part large-h128 100 90 --batch 128 --heads 128
part fp8 140 120 --batch 16,128 --heads 16,128 --lens 4096,16384 --paths triton,triton-occupancy,triton-fp8,vllm
# A/B of the fp8 kernels reading the split count at one split (build/wip) against this revision, alternating.
i=0
for v in old new new old; do
  i=$((i+1))
  if [ $v = old ]; then d="$PWD"; else d="$PWD/../wip"; fi
  (cd $d; PYTHONPATH="$d" timeout 90 python3 -m mla_jax bench --batch 64,128 --heads 128 --lens 4096,16384 --paths triton-fp8 --repeats 3 --out /tmp/abf-$i 2>&1 | tr '\r' '\n' | grep -v '^bench:') > /tmp/abf-$i.log
  (echo "== round $i: $v ($([ $v = old ] && echo $rev || echo "$rev + wip/fp8-one-split-count's _gluon_kernels.py"))"; cat /tmp/abf-$i.log) >> $OUT/ab-fp8-one-split-count.log
  echo "round $i $v"; grep -E "^ +(64|128) +128" /tmp/abf-$i.log | sort -u
  python3 -c "import json,sys; d=json.load(open('/tmp/abf-$i/results.json')); [print('  kernel', s['B'], s['H'], s['L'], round(s['paths']['triton-fp8']['device_ms'], 4), s['paths']['triton-fp8']['kernels_per_call']) for s in d['shapes']]"
  echo "t $(( $(date +%s) - t0 )) s"
done
