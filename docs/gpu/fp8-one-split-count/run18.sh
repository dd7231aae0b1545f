#!/usr/bin/env bash
# Sweep part 1 of 3 on one set of kernels: B 1 and 4 at H 16, 64, 128.
source "$(dirname "$0")/common.sh"
part small 575 540 --batch 1,4 --heads 16,64,128
