#!/usr/bin/env bash
# main (4c32b82): the even-block split widening A/B (build/gk_even.py), test_gpu's Gluon fp8 cases, ncu warp-state sampling of the fp8 and bf16 seesaw at 128/128/16384.
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc PYTHONPATH="$PWD:$PWD/scripts:$PWD/build" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat build/REV); echo "rev $rev"; t0=$(date +%s)
(echo "rev $rev"; timeout 100 python3 build/ab_even.py 128x128x16384,16x128x4096,64x64x4096 2>&1) | tee $OUT/ab-even.log
echo "t $(( $(date +%s) - t0 )) s"
M=smsp__pcsamp_sample_count
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle selected not_selected dispatch_stall membar sleeping branch_resolving no_instructions misc drain imc_miss tex_throttle; do M="$M,smsp__pcsamp_warps_issue_stalled_$r"; done
for cache in fp8 bf16; do
  timeout 110 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
    --metrics $M -o /tmp/s-$cache python3 scripts/profile_stages.py 128x128x16384 --cache $cache --gluon > $OUT/ncu-$cache-run.txt 2>&1
  tail -2 $OUT/ncu-$cache-run.txt
  ncu -i /tmp/s-$cache.ncu-rep --print-details all --print-units base > $OUT/ncu-seesaw-$cache-details.txt 2>&1
  ncu -i /tmp/s-$cache.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu-seesaw-$cache-sass.csv.gz
  grep -E "Duration|DRAM Throughput|L1/TEX Cache Throughput" $OUT/ncu-seesaw-$cache-details.txt | head -5
  echo "t $(( $(date +%s) - t0 )) s"
done
left=$(( 520 - ($(date +%s) - t0) ))
(echo "rev $rev"; timeout $left python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu.py -k "gluon_stage1 and fp8" 2>&1) > $OUT/gpu-tests-fp8.log; tail -n 3 $OUT/gpu-tests-fp8.log
echo "t $(( $(date +%s) - t0 )) s"
