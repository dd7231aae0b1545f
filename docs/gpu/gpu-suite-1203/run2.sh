#!/bin/bash
# One device call: nbclient, nbformat and ipykernel from carried wheels (build/whl:
# the GPU machine installs nothing from a registry), then the test files given (the
# notebooks and the bench's tests after run.sh's pass) on the H200. Logs to $OUT.
set -u
python -m pip install -q --no-index --find-links build/whl nbclient nbformat ipykernel \
  > "$OUT/pip.log" 2>&1; echo "pip rc=$?" >> "$OUT/pip.log"
LIMIT=${LIMIT:-400} bash docs/gpu/gpu-suite-1203/run.sh "$@"
