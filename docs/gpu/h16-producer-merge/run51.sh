#!/usr/bin/env bash
# ncu warp-state sampling of the producer-warpgroup fp8 16-head kernel (wip/fp8-h16-producer)
# at 128/16/16384, one split (one CTA an SM, 128 CTAs).
source "$(dirname "$0")/common.sh"
W="$PWD/../ws"; cd $W
M=smsp__pcsamp_sample_count
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle selected not_selected dispatch_stall membar sleeping branch_resolving no_instructions misc drain imc_miss tex_throttle; do M="$M,smsp__pcsamp_warps_issue_stalled_$r"; done
PYTHONPATH="$W:$W/scripts" timeout 250 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon" --launch-skip 2 --launch-count 1 \
   --section SourceCounters --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
   --metrics $M -o /tmp/ws python3 scripts/profile_stages.py 128x16x16384 --cache fp8 --gluon --splits 1 > $OUT/ncu-ws-run.txt 2>&1
tail -3 $OUT/ncu-ws-run.txt
ncu -i /tmp/ws.ncu-rep --print-details all --print-units base > $OUT/ncu-ws-details.txt 2>&1
ncu -i /tmp/ws.ncu-rep --page source --csv --print-source sass > $OUT/ncu-ws-sass.csv 2>&1
gzip -k $OUT/ncu-ws-sass.csv; rm $OUT/ncu-ws-sass.csv
wc -c $OUT/*; grep -i "Duration\|Throughput" $OUT/ncu-ws-details.txt | head -20
echo "done $(( $(date +%s) - t0 )) s"
