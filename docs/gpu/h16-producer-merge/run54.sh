#!/usr/bin/env bash
# wip/fp8-h16-ring (fixed V^T operand): gluon_check --only-fp8-h16 --skip-timing, ring_ab.py
# at four shapes, then Nsight Compute warp-state sampling of the ring kernel at 128/16/16384.
source "$(dirname "$0")/common.sh"
R="$PWD/../ring"; cd $R
(echo "rev $(cat REV)"; PYTHONPATH="$R:$R/scripts" timeout 150 python3 scripts/gluon_check.py --only-fp8-h16 --skip-timing 2>&1) > $OUT/ring-check.log; grep -c PASS $OUT/ring-check.log; grep -E "FAIL|Error|error" $OUT/ring-check.log | head; tail -n 2 $OUT/ring-check.log
echo "check $(( $(date +%s) - t0 )) s"
(echo "rev $(cat REV)"; PYTHONPATH="$R:$R/scripts" timeout 120 python3 ../t50/ring_ab.py 128x16x16384,64x16x4096,16x16x4096,1x16x65536 2>&1) > $OUT/ring-ab.log; cat $OUT/ring-ab.log
echo "ab $(( $(date +%s) - t0 )) s"
M=smsp__pcsamp_sample_count
for r in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle selected not_selected dispatch_stall membar sleeping branch_resolving no_instructions misc drain imc_miss tex_throttle; do M="$M,smsp__pcsamp_warps_issue_stalled_$r"; done
PYTHONPATH="$R:$R/scripts" timeout 120 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon" --launch-skip 2 --launch-count 1 \
   --section SourceCounters --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SpeedOfLight \
   --metrics $M -o /tmp/ring python3 scripts/profile_stages.py 128x16x16384 --cache fp8 --gluon > $OUT/ncu-ring-run.txt 2>&1
tail -2 $OUT/ncu-ring-run.txt
ncu -i /tmp/ring.ncu-rep --print-details all --print-units base > $OUT/ncu-ring-details.txt 2>&1
ncu -i /tmp/ring.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu-ring-sass.csv.gz
grep -E "Duration|DRAM Throughput|L1/TEX Cache Throughput" $OUT/ncu-ring-details.txt | head -5
echo "done $(( $(date +%s) - t0 )) s"
