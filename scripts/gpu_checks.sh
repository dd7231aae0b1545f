#!/usr/bin/env bash
# The GPU checks, on any machine with a CUDA GPU and this checkout importable (python3
# with jax[cuda12], triton 3.6 and torch; MLA_JAX_VLLM_KERNEL pointing
# at vLLM's kernel file for the vLLM columns, docs/vllm_kernel.md). Logs go under DIR:
#   scripts/gpu_checks.sh --out DIR MODE [MODE ...]
# Modes:
#   tests              the test suite on the GPU (the interpreter and notebook tests are CI's)
#   tests-a, tests-b   its folders gpu, kernels, model and tools, then api (two shorter runs)
#   extras             compare tables (with vLLM), the triton demo, the fp8 bench
#   steps              step timing: donated buffer vs allocated vs scan
#   ncu                Nsight Compute's full report of stage 1 at the target shapes and
#                      one-block shapes, and of stage 2 at B=1 (needs hardware counters)
#   ncu-gluon          the same for the Gluon stage 1 kernels (sm_90) at their target shapes
#   bench-small        the sweep at B = 1, 4 (all H, L; L=65536 included)
#   bench-large        the sweep at B = 16, 64, 128
#   experiments        each stage's device time, then the stage-1 config sweep
#   deepseek           the model bench: DeepSeek-V2-Lite's decode and prefill against the
#                      floors and transformers, and DeepSeek parity through triton
#   gluon              the Gluon stage 1 against float64 and the tl kernel, and both timed
#   first-call         the first mla_decode in three new processes sharing a new kernel cache
# Merge the two bench parts with `python -m mla_jax bench --report-only small.json large.json`.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,/^set /p' "$0" | sed '$d' | cut -c3-
    exit 0
fi
if [ "${1:-}" != "--out" ] || [ -z "${2:-}" ]; then
    echo "usage: scripts/gpu_checks.sh --out DIR MODE [MODE ...]" >&2
    exit 2
fi
OUT="$2"
shift 2
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
BENCH_BUDGET="${BENCH_BUDGET:-480}"
bench_part() {  # name, batches
    timeout $((BENCH_BUDGET + 60)) python3 -m mla_jax bench --batch "$2" --repeats 3 \
        --out "$OUT/bench-$1" --markdown "$OUT/bench-$1/benchmarks.md" \
        --time-budget "$BENCH_BUDGET" 2>&1 | tr '\r' '\n' | grep -v '^bench:' \
        | tee "$OUT/bench-$1.log" | tail -25
    rm -f "$OUT/bench-$1"/*.png  # at most 8 files come back; --report-only redraws them
}
for mode in "$@"; do
    case "$mode" in
    tests|tests-a|tests-b)
        # The interpreter tests skip themselves (numpy >= 2.4 there); notebooks need nbclient;
        # the fuzz suite (xla backend and interpreter) and the sm_90 build checks (compiled
        # in child processes, no GPU used) are CI's, on CPU.
        case "$mode" in
        tests) pattern='tests/*/test_*.py' ;;
        tests-a) pattern='tests/gpu/test_*.py tests/kernels/test_*.py tests/model/test_*.py
                 tests/tools/test_*.py' ;;
        tests-b) pattern='tests/api/test_*.py' ;;
        esac
        files=()
        for f in $pattern; do
            case "$f" in
            tests/tools/test_notebooks.py | tests/api/test_fuzz.py \
                | tests/kernels/test_gluon_build.py | tests/kernels/test_kernel_build.py) ;;
            *) files+=("$f") ;;
            esac
        done
        timeout "${TEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rs "${files[@]}" \
            2>&1 | tee "$OUT/pytest_gpu-$mode.log" | tail -15
        ;;
    extras)
        for heads in 16 128; do
            timeout 60 python3 -m mla_jax compare --batch 8 --heads "$heads" --max-len 8192 \
                --page-size 64 --dtype bfloat16 2>&1 | tee -a "$OUT/compare_h200.txt"
        done
        timeout 60 python3 -m mla_jax demo --backend triton 2>&1 | tee "$OUT/demo_h200.log" \
            | tail -12
        timeout 120 python3 -m mla_jax bench --paths triton,triton-occupancy,triton-fp8 \
            --batch 128 --heads 16,128 --lens 16384 --repeats 3 --out "$OUT/fp8" 2>&1 \
            | tr '\r' '\n' | grep -v '^bench:' | tee "$OUT/fp8_bench.log" | tail -8
        rm -f "$OUT/fp8"/*.png "$OUT/fp8.md"
        ;;
    steps)
        timeout 90 python3 scripts/step_timing.py --out "$OUT/step_timing.json" 2>&1 \
            | tee "$OUT/step_timing.log" | tail -9
        ;;
    experiments)
        timeout 200 python3 scripts/stage_times.py --jax-calls 20 --out "$OUT/stage_times.json" \
            2>&1 | grep -v Warning | tee "$OUT/stage_times.log"
        timeout 330 python3 scripts/sweep_configs.py --out "$OUT/sweep.json" --shapes \
            128x16x16384,64x16x4096,4x16x16384,1x16x16384,1x128x4096,4x128x4096,16x128x4096 \
            2>&1 | grep -v Warning | tee "$OUT/sweep.log" | grep BEST
        ;;
    ncu)
        # The third launch of each kernel (the first two warm up), clocks left alone.
        profile() {  # stage, shape
            timeout 120 ncu --clock-control none --kernel-name "regex:mla_decode_$1\$" \
                --launch-skip 2 --launch-count 1 --set full --print-units base \
                python3 scripts/profile_stages.py "$2" > "$OUT/ncu-$1-$2.txt" 2>&1
            grep -E "^  +(Duration|Registers Per|Achieved Occupancy|Memory Throughput|Compute \(SM\) Throughput) " \
                "$OUT/ncu-$1-$2.txt" | sed "s/^/$1 $2: /"
        }
        for shape in 1x128x64 1x16x64 1x128x4096 16x128x4096 128x128x4096 128x16x16384; do
            profile stage1 "$shape"
        done
        profile stage2 1x128x4096
        ;;
    ncu-gluon)
        for run in "128x16x16384 fp8" "16x16x16384 fp8" "128x128x16384 bf16" \
            "128x128x16384 fp8" "16x128x4096 bf16" "1x128x64 bf16" "1x16x64 fp8"; do
            read -r shape cache <<< "$run"
            timeout 150 ncu --clock-control none --kernel-name "regex:mla_decode_stage1_gluon" \
                --launch-skip 2 --launch-count 1 --set full --print-units base \
                python3 scripts/profile_stages.py "$shape" --cache "$cache" --gluon \
                > "$OUT/ncu-gluon-$shape-$cache.txt" 2>&1
            grep -E "^  +(Duration|Registers Per|Achieved Occupancy|Memory Throughput|Compute \(SM\) Throughput) " \
                "$OUT/ncu-gluon-$shape-$cache.txt" | sed "s/^/gluon $shape $cache: /"
        done
        ;;
    gluon)
        timeout 300 python3 scripts/gluon_check.py 2>&1 | tee "$OUT/gluon_check.log" | tail -12
        ;;
    first-call)
        cache="$(mktemp -d)"
        for _ in 1 2 3; do
            TRITON_CACHE_DIR="$cache" timeout 120 python3 scripts/first_call.py 2>&1 | tail -1
        done | tee "$OUT/first_call.log"
        ;;
    deepseek)
        timeout 540 python3 -m mla_jax model-bench --time-budget 450 --out "$OUT/model-bench" \
            2>&1 | tee "$OUT/model-bench.out" | tail -30
        ;;
    bench-small) bench_part small 1,4 ;;
    bench-large) bench_part large 16,64,128 ;;
    *) echo "usage: scripts/gpu_checks.sh --out DIR {tests|tests-a|tests-b|extras|steps|experiments|ncu|ncu-gluon|bench-small|bench-large|deepseek|gluon|first-call}..." >&2
       exit 2 ;;
    esac
done
