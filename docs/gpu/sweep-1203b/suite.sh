#!/bin/bash
# Call 1: the whole test suite on the H200 on the final tree (docs/gpu/h16-bf16/run3.sh:
# notebooks' wheels from build/whl, six xdist workers). Logs to $OUT.
bash docs/gpu/h16-bf16/run3.sh
