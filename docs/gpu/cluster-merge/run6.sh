#!/bin/bash
# Nsight Compute on the pair-merging seesaw (v2, loads without .cg) at 64/64/1024: the
# first launch (clusters, merging), then the plain one; warp-state sampling by SASS
# line (docs/gpu/h16-producer-merge/stalls.py). Logs to $OUT; repo root.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
export PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/cluster-merge"
cat build/REV > "$OUT/rev6.txt"
M=smsp__pcsamp_sample_count
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle selected not_selected dispatch_stall membar sleeping branch_resolving no_instructions misc drain imc_miss tex_throttle; do M="$M,smsp__pcsamp_warps_issue_stalled_$r"; done
timeout 150 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon_seesaw" --launch-count 2 \
   --section SourceCounters --section WarpStateStats --section SpeedOfLight --section LaunchStats \
   --metrics $M -o /tmp/pair python3 docs/gpu/cluster-merge/one_call.py 64/64/1024 > "$OUT/ncu-pair-run.txt" 2>&1
echo "ncu rc=$?" >> "$OUT/ncu-pair-run.txt"
ncu -i /tmp/pair.ncu-rep --print-details all --print-units base > "$OUT/ncu-pair-details.txt" 2>&1
ncu -i /tmp/pair.ncu-rep --page source --csv --print-source sass | gzip > "$OUT/ncu-pair-sass.csv.gz"
python3 docs/gpu/h16-producer-merge/stalls.py "$OUT/ncu-pair-sass.csv.gz" > "$OUT/ncu-pair-stalls.txt" 2>&1
