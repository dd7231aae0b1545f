#!/usr/bin/env bash
# The seesaw reading the split count at one split (wip/seesaw-one-split-count): A/B.
source "$(dirname "$0")/common.sh"
ab count-ab old,new,new,old count --batch 64,128 --heads 128 --lens 4096,16384 --paths triton-occupancy
