#!/usr/bin/env bash
# Device call A (about 9 minutes): the test suite on the GPU, then the sweep's parts h32
# (H=32, B 1-64) and large-b128 (B=128 at H 16 and 64).
source docs/gpu/sweep/common.sh
suite 300
part h32 150 135 --heads 32 --batch 1,4,16,64 --paths $P
part large-b128 100 85 --batch 128 --heads 16,64 --paths $P
