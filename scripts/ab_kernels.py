"""Device time of two versions of the Triton kernels, side by side, at every sweep shape.

Issue 6 asks that no sweep shape be slower than the previous release. Through JAX the
shapes that take 10-20 us a call vary by up to 30% between runs of the same code
(runs 26, 28 and 29), more than the changes being judged. This times both stages of
each version under a CUDA graph instead (Triton's launcher on torch tensors,
``stage_times.launchers``): the same inputs, the default split policy, the versions
alternating within each shape, and it checks that their outputs agree.

    mkdir -p build/prev && git archive <previous release> mla_jax | tar -x -C build/prev
    python3 scripts/ab_kernels.py --prev build/prev/mla_jax/kernels.py --out ab.json  # GPU

The previous ``kernels.py`` is loaded from its file, so it shares this checkout's
``mla_jax.tiling`` (unchanged since version 5) and its launch parameters come from its
own ``launch_params``.
"""

import importlib.util
import json
import statistics

import torch
import triton.testing
from stage_times import launchers, make_problem
from sweep_configs import SM, shapes_parser

from mla_jax import bench, kernels
from mla_jax.splits import occupancy_kv_splits
from mla_jax.vllm_kernel import ensure_triton_cache_dir

ROUNDS = 3  # each round times the previous version, then this one


def load_kernels(path):
    spec = importlib.util.spec_from_file_location("mla_jax_prev_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode_call(problem, splits, module):
    """Both stages of ``module`` as one function, and the outputs it writes."""
    stage1, stage2, out, lse = launchers(*problem, splits, module=module)

    def call():
        stage1()
        stage2()

    return call, out, lse


def main():
    parser = shapes_parser(bench.sweep_shapes(bench.BATCHES, bench.HEADS, bench.LENS),
                           "the bench's sweep")
    parser.add_argument("--prev", required=True, help="the previous release's kernels.py")
    args = parser.parse_args()
    versions = {"prev": load_kernels(args.prev), "this": kernels}
    ensure_triton_cache_dir()  # Triton's own launcher, after jax_triton's import emptied it
    rows = []
    for seed, (batch, heads, length) in enumerate(args.shapes):
        problem = make_problem(batch, heads, length, seed)
        splits = occupancy_kv_splits(batch, heads, length, SM)
        calls, outs = {}, {}
        for name, module in versions.items():
            calls[name], *outs[name] = decode_call(problem, splits, module)
            calls[name]()
        diff = float((outs["prev"][0].float() - outs["this"][0].float()).abs().max())
        lse_diff = float((outs["prev"][1] - outs["this"][1]).abs().max())
        times = {name: [] for name in versions}
        for _ in range(ROUNDS):
            for name in versions:
                times[name].append(triton.testing.do_bench_cudagraph(
                    calls[name], rep=50, return_mode="median"))
        ms = {name: statistics.median(t) for name, t in times.items()}
        row = dict(batch=batch, heads=heads, length=length, splits=splits, ms=ms, times_ms=times,
                   ratio=ms["this"] / ms["prev"], max_out_diff=diff, max_lse_diff=lse_diff)
        rows.append(row)
        print(f"B={batch:4d} H={heads:4d} L={length:6d} splits={splits:3d}  prev "
              f"{ms['prev'] * 1e3:8.1f} us  this {ms['this'] * 1e3:8.1f} us  "
              f"this/prev {row['ratio']:.3f}  (rounds: "
              + ", ".join(f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in zip(*times.values()))
              + f")  max|out diff| {diff:.1e}", flush=True)
        assert diff < 0.02 and lse_diff < 1e-3, "the two versions disagree"
        del problem, outs, calls
        torch.cuda.empty_cache()
    slower = [r for r in rows if r["ratio"] > 1.0]
    print(f"this version faster or equal at {len(rows) - len(slower)} of {len(rows)} shapes"
          + "".join(f"; slower at B={r['batch']} H={r['heads']} L={r['length']} "
                    f"({r['ratio']:.3f})" for r in slower))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
