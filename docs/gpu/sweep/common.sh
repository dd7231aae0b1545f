# Sourced by the device calls here, on the device machine, from the repo root: the
# environment (jax-triton from the carried wheel), `part` (a bench part, its log and
# results into $OUT) and `suite` (the test suite on the GPU).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TRITON_CACHE_DIR=/tmp/tc TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="/tmp/site:$PWD:$PWD/scripts" MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
rev=$(cat .ab/REV); echo "rev $rev"
t0=$(date +%s)
P=${P:-triton-occupancy,vllm}  # our default path and vLLM's kernel, in one process
part() {  # name, timeout, budget, bench args
  name=$1; to=$2; budget=$3; shift 3
  (echo "rev $rev"; timeout $to python3 -m mla_jax bench "$@" --repeats 3 --out /tmp/bench-$name --markdown /tmp/bench-$name/benchmarks.md --time-budget $budget 2>&1 | tr '\r' '\n' | grep -v '^bench:') > $OUT/bench-$name.log
  cp /tmp/bench-$name/results.json $OUT/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench-$name.log | sort -u; tail -n 1 $OUT/bench-$name.log
  echo "$name $(( $(date +%s) - t0 )) s"
}
suite() {  # limit in s: every test file, xdist workers sharing the GPU; the notebooks'
  # tests are left out (the GPU machine has no Jupyter; CI runs them)
  local nb; nb=$(find tests -name test_notebooks.py)
  (echo "rev $rev"; nvidia-smi -L; timeout $1 python3 -m pytest tests -q -rfEs -p no:cacheprovider -n 12 \
    ${nb:+--ignore=$nb} --durations=10 2>&1; echo "rc=$? $(( $(date +%s) - t0 )) s") > $OUT/gpu-suite.log
  tail -n 25 $OUT/gpu-suite.log
}
