#!/usr/bin/env bash
# wip/seesaw-early-scale (kv_scale loaded with the split's bounds) against main, kernel
# time, rounds old/new/new/old, at seesaw shapes whose CTAs hold 8-16 blocks.
source "$(dirname "$0")/common.sh"
ab esc-ab old,new,new,old esc --batch 16,64 --heads 64,128 --lens 1024,4096 --paths triton-occupancy
echo "done $(( $(date +%s) - t0 )) s"
