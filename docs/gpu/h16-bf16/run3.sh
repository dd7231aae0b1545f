#!/bin/bash
# The whole test suite on the H200 on the final tree (tests/, notebooks included:
# their wheels from build/whl), xdist workers sharing the GPU. Logs to $OUT.
set -u
python -m pip install -q --no-index --find-links build/whl nbclient nbformat ipykernel \
  > "$OUT/pip.log" 2>&1; echo "pip rc=$?" >> "$OUT/pip.log"
WORKERS=6 LIMIT=540 bash docs/gpu/gpu-suite-1203/run.sh
