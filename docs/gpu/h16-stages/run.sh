#!/bin/bash
# One device call (about 450 s). 1) The tl stage 1 at 16 heads with deeper latent
# pipelines at one CTA an SM (32-token blocks at 4-6 stages, 64-token blocks at 3),
# each at the occupancy split count and half of it, against today's configuration
# (32-token blocks, 3 stages, two CTAs an SM), both stages timed as the bench times
# them (scripts/sweep_configs.py) at 64/16/4096 and 128/16/16384. 2) The two #21
# rows the 72ef8a8 sweep left on their line, alone in new bench processes beside
# vLLM: 64/16/4096 in three, the fp8 128/16/16384 row in two. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV)
t0=$(date +%s)
C='[{"BLOCK_N":32,"num_warps":4,"num_stages":3,"LORA_CHUNKS":4},
{"BLOCK_N":32,"num_warps":4,"num_stages":4,"LORA_CHUNKS":4},
{"BLOCK_N":32,"num_warps":4,"num_stages":5,"LORA_CHUNKS":4},
{"BLOCK_N":32,"num_warps":4,"num_stages":6,"LORA_CHUNKS":4},
{"BLOCK_N":64,"num_warps":4,"num_stages":3,"LORA_CHUNKS":4},
{"BLOCK_N":64,"num_warps":8,"num_stages":3,"LORA_CHUNKS":4}]'
(echo "rev $rev"; timeout 300 python3 scripts/sweep_configs.py --shapes 64x16x4096,128x16x16384 \
  --configs "$C" --occupancy-factors 0.5,1 --out "$OUT/stages.json" 2>&1 | grep -v '^bench:';
 echo "rc=$? $(( $(date +%s) - t0 )) s") > "$OUT/stages.log"
row() {  # log name, process, bench args
  name=$1; i=$2; shift 2
  (echo "rev $rev, process $i"; timeout 70 python3 -m mla_jax bench "$@" --repeats 3 \
    --out /tmp/bench-$name-$i --markdown /tmp/bench-$name-$i/benchmarks.md \
    --time-budget 40 2>&1 | tr '\r' '\n' | grep -v '^bench:') >> "$OUT/bench-$name.log"
  cp /tmp/bench-$name-$i/results.json "$OUT/$name-$i.json"
  echo "process $i $(( $(date +%s) - t0 )) s" >> "$OUT/bench-$name.log"
}
for i in 1 2 3; do
  row 64-16-4096 $i --batch 64 --heads 16 --lens 4096 --paths triton-occupancy,vllm
done
for i in 1 2; do
  row fp8-128-16-16384 $i --batch 128 --heads 16 --lens 16384 \
    --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm
done
