#!/usr/bin/env bash
# Device call 2 (about 9.5 minutes; carry .whl, .vllm, .ab): the GPU test files, then the
# sweep's parts large-b128-h32-h128 and large-b128 (B=128 at H 16, 32, 64, 128).
# Logs to $OUT: gpu-suite.log, sweep-2.tar.
set -u
source docs/gpu/h100-1207/common.sh
suite 330
part large-b128-h32-h128 110 --batch 128 --heads 32,128
part large-b128 100 --batch 128 --heads 16,64
pack sweep-2
el
