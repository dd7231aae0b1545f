#!/usr/bin/env bash
# One device call within the session's last device time: run-ab2.sh, then the GPU
# test files (run-suite.sh) in what is left of CALL_S seconds. Logs to $OUT.
t0=$(date +%s)
bash docs/gpu/jax-triton/run-ab2.sh
left=$(( ${CALL_S:-560} - ($(date +%s) - t0) - 15 ))
echo "suite limit ${left} s"
[ $left -gt 60 ] && LIMIT=$left bash docs/gpu/jax-triton/run-suite.sh
