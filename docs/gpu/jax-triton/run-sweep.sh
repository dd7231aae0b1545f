#!/usr/bin/env bash
# Device call 3 (about 8 minutes): the whole sweep through this tree's launch, the
# default path and vLLM's kernel in the same bench process: the parts of
# docs/benchmarks/parts/, each under its own time budget. Parts and logs go to
# $OUT/sweep.tgz (the tables also to the console).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3 \
    TRITON_CACHE_DIR=/tmp/tc-new PYTHONPATH="/tmp/site:$PWD:$PWD/scripts" \
    MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
S=/tmp/sweep; mkdir -p $S; t0=$(date +%s); P=triton-occupancy,vllm
part() {  # name, timeout, budget, bench args
  name=$1; to=$2; budget=$3; shift 3
  (echo "rev $(cat .ab/REV)"; timeout $to python3 -m mla_jax bench "$@" --repeats 3 \
     --out $S/$name --markdown $S/$name/benchmarks.md --time-budget $budget 2>&1 \
     | tr '\r' '\n' | grep -v '^bench:') > $S/bench-$name.log
  cp $S/$name/results.json $S/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $S/bench-$name.log | sort -u; tail -n 1 $S/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
part small 150 130 --batch 1,4 --heads 16,64,128 --paths $P
part large-b16-b64 110 95 --batch 16,64 --heads 16,64,128 --paths $P
part h32 75 62 --heads 32 --batch 1,4,16,64 --paths $P
part large-b128 60 48 --batch 128 --heads 16,64 --paths $P
part large-b128-h32-h128 65 52 --batch 128 --heads 32,128 --paths $P
part fp8-b128-l16384 55 42 --batch 128 --heads 16,128 --lens 16384 \
  --paths triton-occupancy,triton-fp8,triton-fp8-mma,vllm
tar -czf $OUT/sweep.tgz -C $S $(cd $S && ls *.json bench-*.log)
