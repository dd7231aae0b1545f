"""Device time of two versions of the Triton kernels, side by side, at every sweep shape.

Through JAX the shapes that take 10-20 us a call vary by up to 30% between runs of the
same code, more than the kernel changes being judged (docs/performance.md). This times
both stages of each version under a CUDA graph instead (Triton's launcher on torch
tensors, ``stage_times.launchers``): the same inputs, the default split policy, the
versions alternating within each shape (and which goes first, round by round), and it
checks that their outputs agree.

    mkdir -p build/prev && git archive <previous release> mla_jax | tar -x -C build/prev
    python3 scripts/ab_kernels.py --prev build/prev/mla_jax/kernels.py --out ab.json  # GPU
    python3 scripts/ab_kernels.py --prev mla_jax/kernels.py --this build/next/kernels.py

The previous ``kernels.py`` is loaded from its file, so it shares this checkout's
``mla_jax._tiling`` and its launch parameters come from its own ``launch_params``. Each
version runs the split count a static ``max_seq_len`` gives it: one whose
``launch_params`` takes ``batch_tokens`` picks its head tile with the batch's tokens
(``_tiling.head_tile``) and runs ``occupancy_kv_splits``' count for that tile; an older
one runs the default tile and that tile's count.
"""

import importlib.util
import inspect
import json
import statistics

import torch
import triton.testing
from stage_times import launchers, make_problem
from sweep_configs import SM, shapes_parser

from mla_jax import kernels
from mla_jax.splits import _occupancy_splits, occupancy_kv_splits
from mla_jax.tools import bench

ROUNDS = 4  # the two versions alternate which goes first


def load_kernels(path, name):
    spec = importlib.util.spec_from_file_location(f"mla_jax_{name}_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan(module, batch, heads, length):
    """``(splits, batch_tokens)`` of ``module`` at a static length: the small-batch
    head tile where its ``launch_params`` can take it, else the default tile."""
    if "batch_tokens" in inspect.signature(module.launch_params).parameters:
        return occupancy_kv_splits(batch, heads, length, SM), batch * length
    return _occupancy_splits(batch, heads, length, SM, batch_tokens=None), None


def decode_calls(problem, splits, module, batch_tokens=None):
    """``{"both": ..., "stage1": ..., "stage2": ...}`` launchers of ``module``, and the
    outputs they write."""
    stage1, stage2, out, lse = launchers(*problem, splits, module=module, batch_tokens=batch_tokens)

    def both():
        stage1()
        stage2()

    return {"both": both, "stage1": stage1, "stage2": stage2}, out, lse


def main():
    parser = shapes_parser(
        bench.sweep_shapes(bench.BATCHES, bench.HEADS, bench.LENS), "the bench's sweep"
    )
    parser.add_argument("--prev", required=True, help="the previous release's kernels.py")
    parser.add_argument(
        "--this",
        help="the kernels.py to judge (default: this checkout's), "
        "e.g. a prepared branch's, with --prev this checkout's",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also time each stage alone (both versions, same rounds)",
    )
    args = parser.parse_args()
    versions = {
        "prev": load_kernels(args.prev, "prev"),
        "this": load_kernels(args.this, "this") if args.this else kernels,
    }
    rows = []
    for seed, (batch, heads, length) in enumerate(args.shapes):
        problem = make_problem(batch, heads, length, seed)
        plans = {name: plan(module, batch, heads, length) for name, module in versions.items()}
        splits = plans["this"][0]
        calls, outs = {}, {}
        for name, module in versions.items():
            splits_of, tokens_of = plans[name]
            calls[name], *outs[name] = decode_calls(problem, splits_of, module, tokens_of)
            calls[name]["both"]()
        diff = float((outs["prev"][0].float() - outs["this"][0].float()).abs().max())
        lse_diff = float((outs["prev"][1] - outs["this"][1]).abs().max())
        parts = ("both", "stage1", "stage2") if args.stages else ("both",)
        times = {part: {name: [] for name in versions} for part in parts}
        for r in range(ROUNDS):
            # Each round reverses the order, so neither version always runs on the
            # clocks the other left behind (the long shapes heat the card).
            order = list(versions) if r % 2 == 0 else list(reversed(versions))
            for part in parts:
                for name in order:
                    times[part][name].append(
                        triton.testing.do_bench_cudagraph(
                            calls[name][part], rep=50, return_mode="median"
                        )
                    )
        ms = {name: statistics.median(t) for name, t in times["both"].items()}
        row = dict(
            batch=batch,
            heads=heads,
            length=length,
            splits=splits,
            prev_splits=plans["prev"][0],
            ms=ms,
            times_ms=times["both"],
            ratio=ms["this"] / ms["prev"],
            max_out_diff=diff,
            max_lse_diff=lse_diff,
        )
        stages = {
            part: {name: statistics.median(t) for name, t in times[part].items()}
            for part in parts[1:]
        }
        if stages:
            row["stage_ms"] = stages
        rows.append(row)
        print(
            f"B={batch:4d} H={heads:4d} L={length:6d} splits={plans['prev'][0]:3d}/{splits:3d}"
            "  prev "
            f"{ms['prev'] * 1e3:8.1f} us  this {ms['this'] * 1e3:8.1f} us  "
            f"this/prev {row['ratio']:.3f}  (rounds: "
            + ", ".join(f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in zip(*times["both"].values()))
            + f")  max|out diff| {diff:.1e}"
            + "".join(
                f"  {part} {t['prev'] * 1e3:.1f}/{t['this'] * 1e3:.1f} us"
                for part, t in stages.items()
            ),
            flush=True,
        )
        assert diff < 0.02 and lse_diff < 1e-3, "the two versions disagree"
        del problem, outs, calls
        torch.cuda.empty_cache()
    slower = [r for r in rows if r["ratio"] > 1.0]
    print(
        f"this version faster or equal at {len(rows) - len(slower)} of {len(rows)} shapes"
        + "".join(
            f"; slower at B={r['batch']} H={r['heads']} L={r['length']} ({r['ratio']:.3f})"
            for r in slower
        )
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
