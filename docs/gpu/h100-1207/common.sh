# Sourced by this folder's device calls, on the device machine, from the repo root:
# jax-triton from the carried wheel, the environment, and the helpers
#   part NAME SECONDS BENCH-ARGS...  a sweep part (our default path and vLLM's kernel in
#                                    one process, or the paths $BENCH_PATHS names) into
#                                    /tmp/parts, its time budget SECONDS less 20 (none
#                                    when under 40 s are left)
#   suite SECONDS                    the GPU test files (scripts/gpu_checks.sh's choice),
#                                    12 xdist workers sharing the GPU
#   pack NAME                        /tmp/parts into $OUT/NAME.tar (eight files come back)
#   base CMD...                      CMD on .ab/base's tree (its own Triton cache), as new/old
#   byte_compile TREE B H L          byte-compiles every module a first mla_decode at B/H/L
#                                    imports on TREE, and counts what a new process then reads
#                                    from bytecode (PYTHONPYCACHEPREFIX: the device's packages)
#   first_calls TREE B H L RUN...    scripts/first_call.py once per RUN (cold, warm: a label),
#                                    then once with --phases, on one Triton cache per shape
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
export MLA_JAX_VLLM_KERNEL="$PWD/.vllm/triton_decode_attention.py"
NEW=$PWD OLD=$PWD/.ab/old rev=$(cat .ab/REV)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
deadline=${DEADLINE:-575}
new() { PYTHONPATH="/tmp/site:$NEW:$NEW/scripts" TRITON_CACHE_DIR=/tmp/tc-new "$@"; }
old() { (cd "$OLD" && PYTHONPATH="$OLD:$OLD/scripts" TRITON_CACHE_DIR=/tmp/tc-old "$@"); }
base() { (cd "$NEW/.ab/base" && PYTHONPATH="/tmp/site:$NEW/.ab/base" TRITON_CACHE_DIR=/tmp/tc-base "$@"); }
mkdir -p /tmp/parts
part() {
  local name=$1 want=$2; shift 2
  local left=$(( deadline - ($(date +%s) - t0) )); local to=$(( want < left ? want : left ))
  if [ $to -lt 40 ]; then echo "$name: not run, $left s left"; return; fi
  (echo "rev $rev"; new timeout $to python3 -m mla_jax bench "$@" --paths "${BENCH_PATHS:-triton-occupancy,vllm}" \
     --repeats 3 --out /tmp/b-$name --markdown /tmp/b-$name.md --time-budget $(( to - 20 )) 2>&1 \
     | tr '\r' '\n' | grep -v '^bench:') > /tmp/parts/bench-$name.log
  cp /tmp/b-$name/results.json /tmp/parts/$name.json
  grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " /tmp/parts/bench-$name.log | sort -u; tail -n 1 /tmp/parts/bench-$name.log
  echo "$name $(el)"
}
suite() {
  local files=()
  for f in tests/*/test_*.py; do
    case "$f" in
    tests/tools/test_notebooks.py | tests/api/test_fuzz.py | tests/kernels/test_gluon_build.py \
      | tests/kernels/test_kernel_build.py) ;;
    *) files+=("$f") ;;
    esac
  done
  (echo "rev $rev"; nvidia-smi -L; new timeout $1 python3 -m pytest -q -rfEs -p no:cacheprovider -n 12 \
     -m "not interpreter" --durations=15 "${files[@]}" 2>&1; echo "rc=$? $(el)") > $OUT/gpu-suite.log
  tail -n 30 $OUT/gpu-suite.log
}
pack() { tar -C /tmp/parts -cf $OUT/$1.tar . ; ls /tmp/parts; }
byte_compile() {
  local tree=$1; shift
  $tree env TRITON_CACHE_DIR=/tmp/fc-$tree python3 -v $NEW/scripts/first_call.py --batch $1 --heads $2 --max-len $3 2>&1 \
    | sed -nE "s/^# code object from '?([^']*\.py)'?$/\1/p; s/^# .*\.pyc matches (.*\.py)$/\1/p" > /tmp/src-$tree.txt
  sort -u /tmp/src-$tree.txt | xargs python3 -m compileall -q -j 16 > /dev/null 2>&1
  $tree python3 -v -c "import mla_jax._triton_backend" > /tmp/v.txt 2>&1
  echo "$tree: $(sort -u /tmp/src-$tree.txt | wc -l) files compiled; a new process reads $(grep -c 'pyc matches' /tmp/v.txt) from bytecode, compiles $(grep -c 'code object from .*\.py' /tmp/v.txt) from source"
}
first_calls() {
  local tree=$1 b=$2 h=$3 l=$4 i; shift 4
  for i in "$@"; do
    echo -n "$tree $i: "
    $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$b-$h-$l timeout 60 python3 $NEW/scripts/first_call.py --batch $b --heads $h --max-len $l 2>&1 | grep "first mla_decode"
  done
  echo -n "$tree warm, "
  $tree env TRITON_CACHE_DIR=/tmp/fc-$tree-$b-$h-$l timeout 60 python3 $NEW/scripts/first_call.py --phases --batch $b --heads $h --max-len $l 2>&1 | grep "phases"
}
