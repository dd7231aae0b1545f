#!/bin/bash
# Nsight Compute warp-state sampling of the fp8-MMA stage 1 at 128/128/16384 (one
# split), summed by docs/gpu/h16-producer-merge/stalls.py. Logs to $OUT; repo root.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts"
cat build/REV > "$OUT/rev98.txt"
M=smsp__pcsamp_sample_count
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle selected not_selected dispatch_stall membar sleeping branch_resolving no_instructions misc drain imc_miss tex_throttle; do M="$M,smsp__pcsamp_warps_issue_stalled_$r"; done
timeout 170 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon" --launch-skip 2 --launch-count 1 \
   --section SourceCounters --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
   --metrics $M -o /tmp/fp8mma python3 scripts/profile_stages.py 128x128x16384 --cache fp8 --gluon --fp8-mma > "$OUT/ncu-fp8-mma-run.txt" 2>&1
echo "ncu rc=$?" >> "$OUT/ncu-fp8-mma-run.txt"
ncu -i /tmp/fp8mma.ncu-rep --print-details all --print-units base > "$OUT/ncu-fp8-mma-details.txt" 2>&1
ncu -i /tmp/fp8mma.ncu-rep --page source --csv --print-source sass | gzip > "$OUT/ncu-fp8-mma-sass.csv.gz"
python3 docs/gpu/h16-producer-merge/stalls.py "$OUT/ncu-fp8-mma-sass.csv.gz" > "$OUT/ncu-fp8-mma-stalls.txt" 2>&1
