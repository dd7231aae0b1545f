#!/bin/bash
# One device call on the landed tree (the tl stage 1's bf16 partials and the seesaw's
# two-a-store ones): the whole test suite (tests/, notebooks included: their wheels
# from build/whl) with xdist workers, and beside it gluon_check.py --skip-timing
# (correctness only, so sharing the GPU changes nothing it reports). Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc
python -m pip install -q --no-index --find-links build/whl nbclient nbformat ipykernel \
  > "$OUT/pip.log" 2>&1; echo "pip rc=$?" >> "$OUT/pip.log"
(PYTHONPATH="$PWD:$PWD/scripts" TRITON_CACHE_DIR=/tmp/tc2 timeout 500 \
  python scripts/gluon_check.py --skip-timing > "$OUT/check.log" 2>&1;
 echo "rc=$?" >> "$OUT/check.log") &
WORKERS=5 LIMIT=520 bash docs/gpu/gpu-suite-1203/run.sh
wait
