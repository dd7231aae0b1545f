"""Writes notebooks/03_performance.ipynb (committed without outputs).

    docs/gpu/sweep-c11b1c4/merge.sh                 # results.json, page, plots
    scripts/dev python scripts/make_notebook_03.py  # then the notebook

merge.sh runs `bench --report-only` on the five parts of our default path and vLLM's in
docs/benchmarks/parts/ (all five on a0930b3, 2026-12-04: docs/gpu/sweep-a0930b3/) and the
XLA paths of the six in docs/benchmarks/df8ad0c/parts/.

The commentary quotes docs/benchmarks/results.json, comparing paths by their kernel time
(device_ms) and showing the wall clock beside it; the code cells print the numbers it
quotes, so after a new sweep run the notebook and check the text against them. The figures
and the helpers that read the results are mla_jax.tools.bench_report's (the same code
writes the sweep's PNGs); this script holds only the notebook's prose and tables.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03_performance.ipynb"

CELLS = [
    (
        "md",
        r"""
# Performance on an H200

What one decode step costs on the GPU, read from the current sweep in
`docs/benchmarks/results.json` (`python -m mla_jax bench`, 2026-12-04: every row of our
path and vLLM's on a0930b3, the current code; the XLA paths from an earlier sweep, see
below): NVIDIA H200, 68 shapes with B ∈ {1, 4, 16, 64, 128}, H ∈ {16, 32, 64, 128},
L ∈ {1k, 4k, 16k} and L = 64k for B ≤ 4; bf16, latent 512 + rope 64, pages of 64
tokens, shuffled block tables. Four paths:

- **`triton-occupancy`**: our kernels with the occupancy split rule, the library's default
  policy. On sm_90 with a 16-bit cache and H ≥ 32, stage 1 is a Gluon kernel with
  FlashMLA's "seesaw" schedule on 64-head tiles wherever each split holds at least 128
  tokens (two 64-token blocks; `SEESAW_MIN_SPLIT_TOKENS` in `mla_jax/_triton_backend.py`)
  and the 16-head kernel below does not take the step: 25 of the 68 shapes, 11 at H=64
  and 14 at H=128 ([`docs/performance.md`, "Gluon stage 1
  (sm_90)"](../docs/performance.md#gluon-stage-1-sm_90)). Where the seesaw runs a row in
  two splits (at B=64 with H=64), the row's two CTAs are one thread-block cluster that
  merges them, and stage 2 is not launched (["A row's two splits merged in a
  cluster"](../docs/performance.md#a-rows-two-splits-merged-in-a-cluster)). At 38 shapes
  stage 1 is the 16-bit 16-head Gluon kernel (the tokens on the warpgroup MMA's M, one
  CTA an SM): 14 of the 17 H=16 shapes, one 16-head tile a row, from 128 tokens a split
  ([`docs/performance.md`, "A Gluon stage 1 for a 16-bit cache at 16
  heads"](../docs/performance.md#a-gluon-stage-1-for-a-16-bit-cache-at-16-heads)); all
  17 H=32 shapes: the 6 whose step holds at most 16384 tokens (B·L;
  `SMALL_HEADS_BATCH_TOKENS` in `mla_jax/_gluon_kernels.py`) on two 16-head tiles a row,
  from 64 tokens a split ([`docs/performance.md`, "The 16-head kernel at 32
  heads"](../docs/performance.md#the-16-head-kernel-at-32-heads)), and the 11 whose step
  holds more on one 32-head tile a row (`BLOCK_H = 32`, `small_block_h`), from 128
  tokens a split, where the seesaw ran before 4e977bf
  ([`docs/gpu/h32-tile/`](../docs/gpu/h32-tile/README.md)); and, on 32-head tiles from
  64 tokens a split, 5 of the 6 H=64 shapes whose step holds at most 16384 tokens (two
  tiles a row) and 2 of the 3 H=128 shapes whose step holds at most 4096
  (`WIDE_HEADS_BATCH_TOKENS`; four a row), where the seesaw or the tl kernel ran before
  7045be7 ([`docs/performance.md`, "32-head tiles at 64 and 128
  heads"](../docs/performance.md#32-head-tiles-at-64-and-128-heads)). Those tiles do not
  run where the rule planned 16-head programs two an SM (B·L ≤ 4096) and their grid
  (B · H/16 · splits) holds no more programs than the 132 SMs: there each tl program has
  an SM to itself, and the tl stage 1 is the faster (`gluon_split_divisor`; both stages
  in CUDA graphs, 7.8 against 9.1 µs at 1/64/1024 and 8.1 against 9.4 µs at
  1/128/1024:
  [`docs/gpu/h64-tile/logs/ab-tl.log`](../docs/gpu/h64-tile/logs/ab-tl.log)). Its
  split count is the occupancy rule's divided by `split_divisor` (its tiles a row × the
  rule's programs an SM ÷ the rule's tiles a row: 2 at H=16, at H=32 on 16-head tiles
  and at H=64 above 4096 tokens, where the rule planned one 64-head program a (row,
  split) and its grid at the rule's count would take two waves; else 1, as where the
  rule planned 16-head programs two an SM), applied only where its grid at the rule's
  count holds more programs (B · tiles · splits) than the 132 SMs
  (`gluon_split_divisor`): half the rule's count at 18 of the 38 shapes (12 at H=16, 3
  at H=32, 3 at H=64), the rule's count at the others. At the other 5 stage 1 is the
  Triton (`tl`) kernel, all with splits of one 64-token block: 1/16/1024, 1/16/4096 and
  4/16/1024, under the 128 tokens the 16-head kernel takes at H=16, and 1/64/1024 and
  1/128/1024 (16 splits), where the 32-head tiles give way to it. A step with a static
  `max_seq_len` and at most 4096 tokens in its batch runs the tl kernel on 16-head tiles
  at any H where no Gluon kernel takes it: of the 12 such shapes, those 5; the other 7
  run the 16-bit 16-head kernel, three at H=32 and two each at H=64 and 128;
- **`xla`**: the same two-stage algorithm in plain jnp; **`dense`**: plain JAX
  gather + einsum;
- **`vllm`**: vLLM's own `decode_attention_fwd` kernels (see `docs/vllm_kernel.md`).

Our kernels with vLLM's split rule (the `triton` path, whose splits hold 512 tokens) were
not timed in this sweep; their latest numbers, on the kernels of c11b1c4, are in
`docs/benchmarks/c11b1c4/results.json`.

**Two instruments.** The bench times each path two ways
([`docs/performance.md`, "How to measure"](../docs/performance.md#how-to-measure)).

- **Kernel time** (`device_ms`), the measure this notebook compares by. After its timed
  repeats each path runs once more (ten runs of the JAX chain, one replay of vLLM's CUDA
  graph) under `jax.profiler.trace`. CUPTI records JAX's kernels and torch's alike; the
  bench takes the union of the kernels' intervals on the GPU's streams and divides it by
  the calls traced, so the gaps between launches are not in it. It is one instrument for
  our paths and vLLM's, and issue #21 states its targets in it. `kernels_per_call` names
  the kernels with their launches a call: on our Triton path stage 1 and stage 2, or
  stage 1 alone at 18 shapes: the 15 whose grid has one split (64/128, 128/32, 128/64
  and 128/128 by the rule, and 128/16, where the 16-bit 16-head kernel halves the rule's
  two; every L), where stage 1 writes the output and lse itself ([`docs/performance.md`,
  "One split, one kernel"](../docs/performance.md#one-split-one-kernel)), and the 3
  whose rows' two splits a cluster merges (64/64, every L); vLLM's two kernels
  plus two small torch `vectorized_elementwise_kernel` launches (fills) from the plumbing
  around them, which count in vLLM's time. It agrees with CUDA-graph timings of the same
  kernels (`scripts/stage_times.py`; a check on earlier kernels, with the tl stage 1 at
  all three shapes): 16.66 against 16.8 µs at 1/128/4096, 82.1 against 82.5 µs at
  64/16/4096, 0.557 against 0.572 ms at 128/16/16384
  ([`docs/gpu/bench-kernel-time-check.log`](../docs/gpu/bench-kernel-time-check.log),
  [`docs/gpu/stage-times-kernel-time-check.log`](../docs/gpu/stage-times-kernel-time-check.log)).
- **Wall time** (`ms`), secondary. The JAX paths run K chained calls in one jitted
  function, every call's outputs kept, ten such runs dispatched back to back per host
  sync, the total divided by 10·K; on a GPU the bench counts the kernel calls in each
  compiled chain (two a call, one where stage 1 runs alone) and stops if any is
  missing. vLLM's kernels run as a CUDA graph of K calls replayed between CUDA events.
  K is 5–20 (about 2 ms a run), median of 3 repeats. Below about 40 µs a call the
  host's dispatch, not the GPU, sets the JAX paths' wall time, and it moves from run to
  run: three runs in new processes read 1/16/1024 at 31.7, 30.4 and 35.8 µs and
  1/128/1024 at 40.5, 29.6 and 25.2 µs, whose kernels take 7.1 and 7.8 µs in this sweep
  ([`docs/gpu/bench-wall-with-and-without-traces.log`](../docs/gpu/bench-wall-with-and-without-traces.log);
  its runs with and without `--kernel-time` show that the traced run does not change the
  wall time). The last section but one compares the two instruments.

Our path and vLLM's kernels ran in five parts (parts 1–5 below), each a separate bench
process measuring its own ceilings, with vLLM's kernels in the same process as ours, on
one H200, from `docs/benchmarks/parts/`: `small.json` (B 1 and 4 at H ∈ {16, 64, 128},
24 shapes), `large-b16-b64.json` (B 16 and 64 at those heads, 18), `large-b128.json` (B
128 at H 16 and 64, 6), `large-b128-h32-h128.json` (B 128 at H 32 and 128, 6) and
`h32.json` (H=32 at B 1–64, 14). All five ran on a0930b3 on 2026-12-04, in one lease on
the GPU, right after the whole GPU test suite passed on the same tree (756 passed, 39
skipped; [`docs/gpu/sweep-a0930b3/`](../docs/gpu/sweep-a0930b3/README.md)), so every
row is what the current code runs. The merge is `docs/gpu/sweep-c11b1c4/merge.sh`. The
XLA paths (`xla`, `dense`), whose code did not change, are carried from an earlier sweep
(df8ad0c, 2026-12-01; its six parts, parts 6–11 below, are in
`docs/benchmarks/df8ad0c/parts/`). Each shape's `path_parts` names the part of each
path; a path's floor and its speed-up over vLLM's kernels are those of its own part, so
the XLA paths' are against that sweep's ceilings and vLLM run.

The first cell checks that the default path ran the stage 1 the routing of a0930b3 picks
(the 16-bit 16-head kernel at H=16 from 128 tokens a split, at H=32 with B·L ≤ 16384 on
two 16-head tiles from 64 and with more on one 32-head tile from 128, at H=64 with
B·L ≤ 16384 and at H=128 with B·L ≤ 4096 on two and four 32-head tiles from 64 but for
the steps of B·L ≤ 4096 whose grid of 16-head programs (B · H/16 · the rule's splits)
holds no more than the SMs, at its count; else the seesaw where H ≥ 32 and a split
holds at least 128 tokens; else the tl kernel), and stage 2 wherever stage 1's grid has
more than one split but for the seesaw's rows of two splits, which a cluster merges;
then it prints the default path's kernel time against the sweep before
(`docs/benchmarks/7045be7/`, whose parts of our path ran on be45d36, 4e977bf and
7045be7): −7.6 % (128/64/4096) to +4.3 % (64/128/16384) at the 66 shapes whose stage 1
is the same kernel; at the other 2, 1/64/1024 and 1/128/1024, the tl stage 1 takes 7.4
and 7.8 µs where that sweep's 32-head tiles took 8.7 and 9.0. The bench's
`num_kv_splits` is the rule's count (the first cell checks it against
`mla_jax.splits.occupancy_kv_splits`); where the 16-bit 16-head kernel halves it, the
cells below count the halved one. The sweep before that one, with be45d36's rows at
B ≤ 64 and H ∈ {16, 64, 128}, is in `docs/benchmarks/4e977bf/`; the one before that,
with acd680a's H=32 rows (the seesaw at the 11 with B·L > 16384), in
`docs/benchmarks/acd680a/`; the one before that, with 7f036a1's H=16 rows and 72ef8a8's
other 51, in `docs/benchmarks/7f036a1/`; 72ef8a8's with all its 68 rows in
`docs/benchmarks/72ef8a8/`; the one on 752a389's kernels in `docs/benchmarks/752a389/`;
the one on c11b1c4's kernels, with the `triton` path timed, in
`docs/benchmarks/c11b1c4/`.

Every cell but the last only reads JSON and draws, so the notebook runs anywhere; the last
re-measures a few shapes when a CUDA GPU is present. The figures are drawn by
`mla_jax.tools.bench_report`, the same functions that write the sweep's PNGs.
""",
    ),
    (
        "code",
        r"""
%matplotlib inline
import os

# Set before JAX starts: the live sweep at the end shares the GPU with torch (vLLM).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import collections
import json
from pathlib import Path

from IPython.display import display

from mla_jax.splits import occupancy_kv_splits
from mla_jax.tools.bench_report import (MACHINE_VERSIONS, fmt, heatmap_figure, metric,
                                        time_vs_len_figure, timed_paths)

results = json.loads(Path("../docs/benchmarks/results.json").read_text())
machine, config = results["machine"], results["config"]
DEFAULT = "triton-occupancy"
OURS = [p for p in (DEFAULT, "triton") if p in results["paths"]]
PARTS = results.get("parts") or [{"ceilings": results["ceilings"],
                                  "shapes": len(results["shapes"])}]
SEESAW = "mla_decode_stage1_gluon_seesaw"
H16 = "mla_decode_stage1_gluon_h16"
# The routing the sweep ran (mla_jax._triton_backend and _gluon_kernels at a0930b3, where
# all five parts ran), on a 16-bit cache, the occupancy rule and a static max_seq_len:
# the 16-bit 16-head Gluon kernel at 16 heads (one 16-head tile a row), at exactly 32
# heads (two 16-head tiles a row in a step of at most
# SMALL_STEP_TOKENS[32] tokens, B·L; one 32-head tile a row in a larger one:
# _gluon_kernels.small_block_h) and at exactly 64 and 128 heads in a step of at most
# SMALL_STEP_TOKENS[H] tokens (two and four 32-head tiles a row:
# _gluon_kernels.small_heads), from H16_MIN_TOKENS[H, tile's heads] tokens a split, but
# not those 32-head tiles where the rule planned 16-head programs two an SM and its grid
# (B · H/16 · splits) holds no more of them than SMs (there the tl stage 1); at the
# rule's splits divided by h16_divisor where its grid at the rule's count holds more
# programs (B · tiles · splits) than SMs, else at the rule's count
# (_triton_backend.gluon_split_divisor); else, with at least 32 heads (64 or more here),
# the seesaw stage 1 where each split holds at least SEESAW_MIN_TOKENS tokens (where it
# runs a row in two splits, the row's two CTAs are a thread-block cluster that merges
# them, and stage 2 is not launched: _gluon_kernels.cluster_size); else the tl stage 1.
SEESAW_MIN_TOKENS = 128
H16_MIN_TOKENS = {(16, 16): 128, (32, 16): 64, (32, 32): 128, (64, 32): 64, (128, 32): 64}
SMALL_STEP_TOKENS = {32: 16384, 64: 16384, 128: 4096}
RULE_SMALL_TOKENS = 4096  # _tiling.SMALL_BATCH_TOKENS: up to it the rule's tile has 16 heads


def span(values, spec=".2f"):
    return f"{min(values):{spec}}–{max(values):{spec}}"


def at(B, H, L):
    return next(s for s in results["shapes"] if (s["B"], s["H"], s["L"]) == (B, H, L))


def name(s):
    return f"{s['B']}/{s['H']}/{s['L']}"


def rate(s, p, unit):
    # TB/s of KV reads or TFLOP/s at the path's kernel time.
    ms = metric(s, p, "device_ms")
    return None if ms is None else s["kv_bytes" if unit == "TB/s" else "flops"] / ms / 1e9


def stage1(s, p=DEFAULT):
    # Path p's stage 1 as the trace saw it: "seesaw", "h16" (the 16-bit 16-head Gluon
    # kernel) or "tl".
    seen = metric(s, p, "kernels_per_call") or {}
    return "seesaw" if SEESAW in seen else "h16" if H16 in seen else "tl"


def gluon_stage1(s, p=DEFAULT):
    # Where the trace saw path p's stage 1 run as a Gluon kernel.
    return stage1(s, p) != "tl"


def h16_tile(s, p=DEFAULT):
    # The heads of a tile where path p's routing picks the 16-bit 16-head Gluon kernel (the
    # occupancy rule; 16 heads; 32: 16-head tiles in a small step, else one 32-head tile;
    # 64 and 128: 32-head tiles in a small step), else 0.
    H, tokens = s["H"], s["B"] * s["L"]
    if p != DEFAULT or H not in (16, 32, 64, 128):
        return 0
    if H == 16:
        return 16
    if H == 32:
        return 16 if tokens <= SMALL_STEP_TOKENS[H] else 32
    return 32 if tokens <= SMALL_STEP_TOKENS[H] else 0


def h16_tiles(s, p=DEFAULT):
    # Tiles a row where path p's routing picks the 16-bit 16-head Gluon kernel, else 0.
    tile = h16_tile(s, p)
    return s["H"] // tile if tile else 0


def stage1_tiles(s, p=DEFAULT):
    # stage1's kind, with the 16-bit 16-head kernel's tiles a row × their heads.
    kind = stage1(s, p)
    return f"{kind} {h16_tiles(s, p)}×{h16_tile(s, p)}" if kind == "h16" else kind


def rule_tile(s):
    # The occupancy rule's head tile (_tiling.head_tile): 16 heads, two programs an SM, in a
    # step of at most RULE_SMALL_TOKENS tokens or at 16 heads; else H (up to 64), one an SM.
    return 16 if s["B"] * s["L"] <= RULE_SMALL_TOKENS else min(s["H"], 64)


def h16_divisor(s, p=DEFAULT):
    # _gluon_kernels.split_divisor: the 16-bit 16-head kernel's tiles a row × the rule's
    # programs an SM ÷ the rule's tiles a row (2 at 16 heads, at 32 with 16-head tiles and
    # at 64 above RULE_SMALL_TOKENS tokens; else 1).
    tile = rule_tile(s)
    return max(1, h16_tiles(s, p) * (2 if tile == 16 else 1) // (s["H"] // tile))


def h16_splits(s, p=DEFAULT):
    # The 16-bit 16-head Gluon kernel's split count on path p; None where it does not run.
    n, tile = metric(s, p, "num_kv_splits"), h16_tile(s, p)
    if not tile:
        return None
    if (s["H"] > tile > 16 and rule_tile(s) == 16
            and s["B"] * s["H"] // 16 * n <= machine["sm_count"]):
        return None  # each of the rule's 16-head programs has an SM: the tl stage 1
    divisor = h16_divisor(s, p)
    if divisor > 1 and s["B"] * h16_tiles(s, p) * n > machine["sm_count"]:
        if n < divisor:
            return None
        n //= divisor
    return n if -(-s["L"] // n) >= H16_MIN_TOKENS[s["H"], tile] else None


def kernel_splits(s, p=DEFAULT):
    # The splits path p's stage 1 ran (the rule's count, halved where the 16-bit 16-head
    # Gluon kernel halves it).
    return h16_splits(s, p) or metric(s, p, "num_kv_splits")


def split_tokens(s, p=DEFAULT):
    # Tokens in each of a row's splits on path p.
    return -(-s["L"] // kernel_splits(s, p))


def seesaw_routed(s, p=DEFAULT):
    # Where the routing gives path p the seesaw stage 1 (a 16-bit cache, as in the sweep):
    # at least 32 heads where the 16-head kernel's routing does not take the step (where it
    # does, but the splits are too short for it, the tl kernel runs).
    return (s["H"] >= 32 and not h16_tiles(s, p)
            and split_tokens(s, p) >= SEESAW_MIN_TOKENS)


def cluster_merged(s, p=DEFAULT):
    # Where the seesaw runs a row in two splits and merges them in a cluster.
    return kernel_splits(s, p) == 2 and seesaw_routed(s, p)


def per_call(s, p):
    # Triton kernels a call: stage 1 alone where the grid has one split or a cluster
    # merges a row's two, else both stages.
    return 1 if kernel_splits(s, p) == 1 or cluster_merged(s, p) else 2


versions = ", ".join(f"{k} {machine[k]}" for k in MACHINE_VERSIONS if machine.get(k))
print(f"{machine['device']} ({machine['sm_count']} SMs), {versions}, {machine['date']}")
print(f"{len(results['shapes'])} shapes, {config['calls_rule']}, {config['repeats']} repeats")
for i, part in enumerate(PARTS, 1):
    c = part["ceilings"]
    print(f"part {i}: {part['shapes']} shapes; device copy {c['copy_tbps']:.2f} TB/s, "
          f"bf16 matmul {c['matmul_tflops']:.0f} TFLOP/s, {part.get('elapsed_s') or 0:.0f} s")
# Which part timed each path (path_parts, where parts timed disjoint paths of a shape).
sources = collections.defaultdict(set)
for s in results["shapes"]:
    for p, i in (s.get("path_parts") or {}).items():
        sources[p].add(i + 1)
for p, parts in sources.items():
    print(f"{p}: from parts {', '.join(map(str, sorted(parts)))}")
if "dense" in sources and "vllm" in sources:
    # The XLA paths' speed-up over vLLM is against their own part's vLLM run.
    theirs = [metric(s, "dense", "device_speedup_vs_vllm") * metric(s, "dense", "device_ms")
              / metric(s, "vllm", "device_ms") - 1 for s in results["shapes"]
              if metric(s, "dense", "device_speedup_vs_vllm") and metric(s, "vllm", "device_ms")]
    print(f"vLLM's kernel time in the XLA paths' parts against this sweep's: "
          f"{min(theirs):+.1%} to {max(theirs):+.1%}")


def kernels_as_split(s, p):
    # The timed chain held per_call(s, p) Triton kernels a call; the trace saw stage 2
    # where per_call says both stages and only there.
    v, traced = s["paths"][p], metric(s, p, "kernels_per_call")
    return (v["triton_kernel_calls"] == per_call(s, p) * v["calls"]
            and (not traced or ("mla_decode_stage2" in traced) == (per_call(s, p) == 2)))


counted = [kernels_as_split(s, p) for s in results["shapes"] for p in OURS
           if "triton_kernel_calls" in s["paths"].get(p, {})]
print(f"Triton kernels a call as the split grid says (stage 1 and stage 2; stage 1 alone "
      f"with one split, or two merged in a cluster) at {sum(counted)} of {len(counted)} "
      f"(shape, path) pairs")
# The bench records the rule's count; the cells below count the one stage 1 ran.
as_rule = [metric(s, DEFAULT, "num_kv_splits")
           == occupancy_kv_splits(s["B"], s["H"], s["L"], machine["sm_count"])
           for s in results["shapes"] if metric(s, DEFAULT, "num_kv_splits")]
print(f"{DEFAULT}'s num_kv_splits is the occupancy rule's count at {sum(as_rule)} of "
      f"{len(as_rule)} shapes")
for p in OURS:
    alone = [s for s in results["shapes"] if metric(s, p, "ms") and per_call(s, p) == 1]
    print(f"{p}: stage 1 alone at {len(alone)} shapes ("
          + ", ".join(f"{label} at {len(sel)}: {', '.join(map(name, sel))}" for label, sel in [
              ("one split a row", [s for s in alone if not cluster_merged(s, p)]),
              ("two merged in a cluster", [s for s in alone if cluster_merged(s, p)])] if sel)
          + ")")
if "triton" not in results["paths"]:
    print("triton (vLLM's split rule on our kernels) was not timed in this sweep; its latest "
          "numbers: ../docs/benchmarks/c11b1c4/results.json")

# What the trace saw: each path's kernels and their launches a call.
for p in (*OURS, "vllm"):
    seen = collections.Counter(
        ", ".join(f"{k.split('(')[0].split('<')[0].split()[-1]} ×{n:g}"
                  for k, n in sorted(metric(s, p, "kernels_per_call").items()))
        for s in results["shapes"] if metric(s, p, "kernels_per_call"))
    for kernels, n in seen.items():
        print(f"{p}: {kernels} at {n} shapes")
for p in OURS:
    gl = [s for s in results["shapes"] if stage1(s, p) == "seesaw"]
    rule = [s for s in results["shapes"] if seesaw_routed(s, p)]
    h16 = [s for s in results["shapes"] if stage1(s, p) == "h16"]
    h16_rule = [s for s in results["shapes"] if h16_splits(s, p)]
    halved = [s for s in h16 if kernel_splits(s, p) < metric(s, p, "num_kv_splits")]
    layouts = collections.Counter(f"{h16_tiles(s, p)}×{h16_tile(s, p)}" for s in h16)
    tl = [s for s in results["shapes"] if stage1(s, p) == "tl"]
    def by_heads(sel):
        return ", ".join(f"H={h}: {n}" for h, n in sorted(collections.Counter(
            s["H"] for s in sel).items()))

    print(f"{p} ran the seesaw stage 1 at {len(gl)} shapes ({by_heads(gl)}), those the "
          f"routing gives it: {gl == rule}; the 16-bit 16-head Gluon kernel at {len(h16)} "
          f"({by_heads(h16)}), those the routing gives it: {h16 == h16_rule} (tiles a row × "
          f"their heads: " + ", ".join(f"{k} at {n}" for k, n in layouts.items())
          + f"; at half the rule's splits at {len(halved)}: {by_heads(halved)}); "
          f"the tl stage 1 at {len(tl)}: " + ", ".join(
              f"{name(s)} ({split_tokens(s, p)} tokens a split)" for s in tl))
# The sweep before (docs/benchmarks/7045be7/: its parts of our path on be45d36, 4e977bf
# and 7045be7): the default path's kernel time against it, by whether stage 1 changed.
before = json.loads(Path("../docs/benchmarks/7045be7/results.json").read_text())


def was(s):
    return next(b for b in before["shapes"] if (b["B"], b["H"], b["L"]) == (s["B"], s["H"], s["L"]))


def change(s):
    return metric(s, DEFAULT, "device_ms") / metric(was(s), DEFAULT, "device_ms") - 1


moved = [s for s in results["shapes"] if stage1(s) != stage1(was(s))]
kept = sorted((s for s in results["shapes"] if s not in moved), key=change)
print(f"{DEFAULT}'s kernel time against the sweep before (../docs/benchmarks/7045be7/): "
      f"another stage 1 at {len(moved)} shapes (" + ", ".join(
          f"{name(s)} {stage1_tiles(was(s))} {metric(was(s), DEFAULT, 'device_ms') * 1e3:.1f}"
          f" -> {stage1_tiles(s)} {metric(s, DEFAULT, 'device_ms') * 1e3:.1f} µs"
          for s in moved)
      + f"); the same at {len(kept)}, {change(kept[0]):+.1%} ({name(kept[0])}) to "
      f"{change(kept[-1]):+.1%} ({name(kept[-1])}); beyond ±2 %: " + ", ".join(
          f"{name(s)} {change(s):+.1%}" for s in kept if abs(change(s)) > 0.02))
tiny = [s for s in results["shapes"] if s["B"] * s["L"] <= 4096]
print(f"B*L <= 4096 (the tl kernel on 16-head tiles where no Gluon kernel runs): {len(tiny)} "
      f"shapes; {DEFAULT} ran a Gluon stage 1 at " + (", ".join(
          f"{name(s)} ({stage1_tiles(s)}, {split_tokens(s)} tokens a split)"
          for s in tiny if gluon_stage1(s)) or "-"))

paths = timed_paths(results)
print()
print(f"{'B':>4} {'H':>4} {'L':>6} {'floor':>8} " + " ".join(f"{p:>16}" for p in paths)
      + "   (kernel time, ms per call)")
for s in results["shapes"]:
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {s['floor_ms']:>8.4f} "
          + " ".join(f"{fmt(metric(s, p, 'device_ms'), '.4f'):>16}" for p in paths))
""",
    ),
    (
        "md",
        r"""
## The floor

A decode step must read every live latent row once (B·L·576 bf16 values) and do
B·H·L·(2·576 + 2·512) flops (q·k over latent + rope, p·v over the 512 latent dims).
Its **floor** is the slower of the two at the ceilings its part of the sweep measured:

$$\text{floor} = \max\left(\frac{\text{KV bytes}}{\text{copy bandwidth}},\;
\frac{\text{flops}}{\text{matmul rate}}\right)$$

The copy bandwidth is a device copy in JAX (bytes read + written per second), the matmul
rate a large square bf16 matmul in JAX: 3.34 TB/s and 685–691 TFLOP/s in the five parts
that timed our path and vLLM's (3.34–3.35 TB/s and 655–683 TFLOP/s in the XLA paths'
six). A step does 1.89·H flops per byte, so the ridge point (matmul rate / copy
bandwidth: 196–207 flop/byte) sits near H ≈ 104–109: **with 16, 32 and 64 heads a step is
memory-bound, with 128 heads compute-bound.** The floor is an ideal: no kernel reaches
both ceilings, and attention's small dot products are not the large GEMM that set the
matmul rate. The copy counts bytes read and written, a pessimistic ceiling for a kernel
that only reads, so large H=16, H=32 and H=64 shapes show more than 100 % of the floor
([`docs/performance.md`, "Hardware floors"](../docs/performance.md#hardware-floors)).
The percentages below are the floor over the kernel time (`device_pct_of_floor`).
""",
    ),
    (
        "code",
        r"""
def part_ceilings(s):
    # The part whose ceilings reproduce this shape's recorded floor.
    def floor(c):
        return max(s["kv_bytes"] / (c["copy_tbps"] * 1e12),
                   s["flops"] / (c["matmul_tflops"] * 1e12)) * 1e3
    return min((p["ceilings"] for p in PARTS), key=lambda c: abs(floor(c) - s["floor_ms"]))


for i, part in enumerate(PARTS, 1):
    ridge = part["ceilings"]["matmul_tflops"] / part["ceilings"]["copy_tbps"]
    print(f"part {i}: ridge point {ridge:.0f} flop/byte -> H = {ridge / (2176 / 1152):.0f}")
for label, p in [("our path's and vLLM's", DEFAULT), ("the XLA paths'", "xla")]:
    cs = [PARTS[i - 1]["ceilings"] for i in sorted(sources.get(p, ()))]
    if cs:
        print(f"{label} {len(cs)} parts: copy {span([c['copy_tbps'] for c in cs])} TB/s, "
              f"matmul {span([c['matmul_tflops'] for c in cs], '.0f')} TFLOP/s, ridge "
              f"{span([c['matmul_tflops'] / c['copy_tbps'] for c in cs], '.0f')} flop/byte")
print()
print(f"{'B':>4} {'H':>4} {'L':>6}  {'memory ms':>9} {'compute ms':>10}  {'bound':8} "
      + " ".join(f"{p + ' %':>18}" for p in paths))
for s in results["shapes"]:
    c = part_ceilings(s)
    mem_ms = s["kv_bytes"] / (c["copy_tbps"] * 1e12) * 1e3
    mm_ms = s["flops"] / (c["matmul_tflops"] * 1e12) * 1e3
    bound = "compute" if mm_ms > mem_ms else "memory"
    pcts = " ".join(f"{fmt(metric(s, p, 'device_pct_of_floor'), '.0f'):>18}" for p in paths)
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {mem_ms:9.4f} {mm_ms:10.4f}  {bound:8} {pcts}")
""",
    ),
    (
        "md",
        r"""
## Kernel time per call against sequence length

One panel per (B, H), a line per path, the floor dashed.
""",
    ),
    (
        "code",
        r"""
display(time_vs_len_figure(results, paths, key="device_ms",
                           title=f"kernel time per call, {machine['device']}"))
""",
    ),
    (
        "md",
        r"""
## How close to the floor

In kernel time:

- **H=16 (memory-bound), B ≥ 64, L ≥ 4k: 118–136 % of the floor (3.96–4.55 TB/s of KV
  reads), 49–53 % for vLLM's kernels.** Stage 1 is the 16-bit 16-head Gluon kernel, one
  CTA an SM at half the rule's splits (one split a row at B=128, stage 1 alone). The
  best, 0.5314 ms at 128/16/16384 (136 %, 4.55 TB/s; vLLM's kernels 1.3747 ms), reads
  faster than the 3.34 TB/s device copy the bench measured and than the 4.22 TB/s
  reference copy rate ([`docs/performance.md`, "Hardware
  floors"](../docs/performance.md#hardware-floors)).
- **H=32, B ≥ 16: 48–135 % of the floor (1.60–4.51 TB/s), 77.1–135.0 % at 8 of the 9
  shapes, where stage 1 is the 16-bit 16-head Gluon kernel on one 32-head tile a row**
  (B·L > 16384), at the rule's count. With splits of ≥ 1024 tokens it reaches
  105–135 % (6 shapes, 3.52–4.51 TB/s): 0.5358 ms at 128/32/16384 (135.0 %, 4.51 TB/s;
  vLLM's kernels 2.6384 ms), 130.0 % at 64/32/16384, 127.4 % at 128/32/4096, 113.7 % at
  16/32/16384, 113.0 % at 64/32/4096, 105.4 % at 128/32/1024 (one 1024-token split a
  row). At B=128 the grid has one split a row, so stage 1 runs alone; at B=64 stage 2
  merges a row's two (the cluster merge is the seesaw's). With 512-token splits: 78.6 %
  at 16/32/4096 and 77.1 % at 64/32/1024. At 16/32/1024, a step of 16384 tokens, stage 1
  is the same kernel on two 16-head tiles a row, at 4 splits of 256 tokens (half the
  rule's 8): 48.0 % (11.8 µs; [`docs/performance.md`, "The 16-head kernel at 32
  heads"](../docs/performance.md#the-16-head-kernel-at-32-heads)). At B ≥ 16, L ≥ 4k
  vLLM's kernels reach 25–28 %. At B ≤ 4 the default path runs the 32-head tile at 3 of
  the 8 shapes: 4/32/65536 (2048-token splits, 113.4 %), 1/32/65536 and 4/32/16384
  (512-token splits, 69.5 and 77.2 %); two 16-head tiles at the other 5, whose steps hold
  at most 16384 tokens: 1/32/16384 and 4/32/4096 (256-token splits, half the rule's
  count: 43.5 and 48.5 %), 1/32/1024, 1/32/4096 and 4/32/1024 (64-token splits, the
  rule's count: 5.3, 16.1 and 19.0 %).
- **H=64, B ≥ 64, L ≥ 4k: 100–121 %** (0.6032 ms at 128/64/16384, one split a row,
  4.01 TB/s; vLLM's kernels 5.0366 ms), 14–15 % for vLLM's kernels. The default path
  runs the seesaw at 11 of the 17 H=64 shapes, the 16-bit 16-head kernel on two 32-head
  tiles a row at 5 of the 6 whose step holds at most 16384 tokens: at half the rule's
  count at 1/64/16384, 4/64/4096 and 16/64/1024 (256-token splits: 35.7, 37.0 and
  36.9 %), at the rule's at 1/64/4096 and 4/64/1024 (64-token splits: 12.8 and
  13.7 %); and the tl kernel at 1/64/1024 (16 splits of 64 tokens: 4.8 %). On the
  seesaw with shorter splits at B=16 and 64: 104.0 % at 16/64/16384 (2048 tokens a
  split), 66.7 % at 16/64/4096 and 60.5 % at 64/64/1024 (512 tokens, the split count
  vLLM's rule also picks; at 64/64/1024 a cluster merges the row's two).
- **Issue #21's target for H=32 and 64, ≥ 60 % of the floor from B=16 up, holds at 16
  of the 18 shapes.** Under it: 16/32/1024 (48.0 %, the 16-bit 16-head kernel on two
  16-head tiles with splits of 256 tokens) and 16/64/1024 (36.9 %, the same kernel on
  two 32-head tiles with splits of 256 tokens, half the rule's 8). What bounds those two
  rows is in [`docs/performance.md`, "Current
  results"](../docs/performance.md#current-results).
- **H=128 (compute-bound): at most 85 % of the floor, 9 % for vLLM's kernels.** At the
  six H=128 shapes with B·L ≥ 256k tokens the default path runs the seesaw at 76–85 % of
  the floor (523–584 TFLOP/s, against a 685–691 TFLOP/s matmul): 1.0006 ms at
  128/128/16384 (584 TFLOP/s; vLLM's kernels 9.8289 ms), 0.5208 ms at 64/128/16384
  (561 TFLOP/s; vLLM's kernels 4.7697 ms), both with one split a row, stage 1 alone.
  vLLM's kernels reach 8–9 % there (57.9–61.2 TFLOP/s). In the seesaw schedule two
  warp-specialised warpgroups each compute the whole of alternate 64-token blocks, so
  one's softmax runs under the other's MMAs; what it still leaves out of FlashMLA's
  kernel is in [`docs/performance.md`, "Gluon stage 1
  (sm_90)"](../docs/performance.md#gluon-stage-1-sm_90). vLLM's kernel groups 16 heads
  per program (`BLOCK_H = 16`), so at H=128 eight programs each load the same KV tiles.
- **Small shapes (B ≤ 4, L ≤ 4k): a fixed cost, not the work.** The floor there is
  0.4–6.6 µs. The default path takes 6.7–17.9 µs of kernel time, `xla` 13.6–67.6 µs,
  `dense` 12.9–49.1 µs, vLLM's kernels 50.8–78.6 µs. Its stage 1 runs 8–64 splits a row
  there, of 64–256 tokens: a Gluon kernel at 11 of the 16. The 16-bit 16-head kernel at
  10: on one 16-head tile a row at 4/16/4096 (9.8 µs, 32 splits of 128 tokens, half the
  rule's 64), on two at the four with H=32 (1/32/1024: 6.7 µs, 16 splits of 64 tokens),
  on two 32-head tiles at 1/64/4096, 4/64/1024 and 4/64/4096 and on four at 1/128/4096
  and 4/128/1024 (1/128/4096: 11.9 µs, 32 splits of 128 tokens). The seesaw at
  4/128/4096 (256 tokens a split); the tl kernel on 16-head tiles at the other 5, all
  with 64 tokens a split: 1/16/1024, 1/16/4096 and 4/16/1024, and 1/64/1024 and
  1/128/1024, where the 32-head tiles give way to it (1/128/1024: 7.8 µs, 16 splits).
- The XLA paths (`xla`, `dense`) gather the rows into a dense copy before their einsums;
  at H=16, B ≥ 64, L ≥ 4k they reach 17–21 % of the floor.
""",
    ),
    (
        "code",
        r"""
groups = [("H=16, B>=64, L>=4k", "TB/s",
           lambda s: s["H"] == 16 and s["B"] >= 64 and s["L"] >= 4096),
          ("H=32, B>=16", "TB/s", lambda s: s["H"] == 32 and s["B"] >= 16),
          ("H=32, B>=16, >= 1024 tokens a split", "TB/s",
           lambda s: s["H"] == 32 and s["B"] >= 16 and split_tokens(s) >= 1024),
          ("H=32, B>=16, L>=4k", "TB/s",
           lambda s: s["H"] == 32 and s["B"] >= 16 and s["L"] >= 4096),
          ("H=64, B>=64, L>=4k", "TB/s",
           lambda s: s["H"] == 64 and s["B"] >= 64 and s["L"] >= 4096),
          ("H=128", "TFLOP/s", lambda s: s["H"] == 128),
          ("H=128, B*L>=256k", "TFLOP/s",
           lambda s: s["H"] == 128 and s["B"] * s["L"] >= 2**18)]
for label, unit, pick in groups:
    sel = [s for s in results["shapes"] if pick(s)]
    print(f"{label} ({len(sel)} shapes): % of the floor (and {unit}), kernel time:\n    "
          + "; ".join(f"{p} {span([metric(s, p, 'device_pct_of_floor') for s in sel], '.0f')} "
                      f"({span([rate(s, p, unit) for s in sel], '.3g')})" for p in paths))
big = [s for s in results["shapes"] if s["H"] == 128 and s["B"] * s["L"] >= 2**18]
print(f"H=128, B*L>=256k: seesaw stage 1 at {sum(stage1(s) == 'seesaw' for s in big)} of "
      f"{len(big)}; "
      "matmul "
      + span([part_ceilings(s)["matmul_tflops"] for s in big], ".0f") + " TFLOP/s")
for H in (32, 64, 128):
    sel = [s for s in results["shapes"] if s["H"] == H]
    kinds = collections.Counter(map(stage1, sel))
    print(f"H={H}, {DEFAULT} % of the floor (stage 1 with the h16 kernel's tiles a row × "
          f"their heads, tokens a split), of {len(sel)}: "
          + ", ".join(f"{kind} at {kinds[kind]}" for kind in ("seesaw", "h16", "tl"))
          + ": " + ", ".join(
              f"{name(s)} {metric(s, DEFAULT, 'device_pct_of_floor'):.1f} "
              f"({stage1_tiles(s)}, {split_tokens(s)})" for s in sel))
# Issue #21: H=32 and 64 at >= 60 % of the floor (kernel time) from B=16 up.
target = [s for s in results["shapes"] if s["H"] in (32, 64) and s["B"] >= 16]
under = [s for s in target if metric(s, DEFAULT, "device_pct_of_floor") < 60]
print(f"issue #21, H=32/64, B>=16, >= 60 % of the floor: {len(target) - len(under)} of "
      f"{len(target)}; under: " + ", ".join(
          f"{name(s)} {metric(s, DEFAULT, 'device_pct_of_floor'):.1f} % "
          f"({stage1_tiles(s)}, {split_tokens(s)} tokens a split)"
          for s in under))
print()
for B, H, L in [(128, 16, 16384), (128, 32, 16384), (16, 32, 1024), (128, 64, 16384),
                (16, 64, 4096), (64, 64, 1024), (64, 128, 16384), (128, 128, 16384),
                (1, 32, 1024), (4, 16, 4096), (1, 128, 1024), (1, 128, 4096)]:
    s = at(B, H, L)
    print(f"{name(s)}: " + "; ".join(
        f"{p} {fmt(metric(s, p, 'device_ms'), '.4f')} ms, {fmt(rate(s, p, 'TB/s'), '.2f')} "
        f"TB/s, {fmt(rate(s, p, 'TFLOP/s'), '.0f')} TFLOP/s, "
        f"{fmt(metric(s, p, 'device_pct_of_floor'), '.0f')} %"
        for p in OURS + ["vllm"] if p in paths))
small = [s for s in results["shapes"] if s["B"] <= 4 and s["L"] <= 4096]
print(f"\nB<=4, L<=4k: floor {span([s['floor_ms'] * 1e3 for s in small], '.1f')} µs; "
      + ", ".join(f"{p} {span([metric(s, p, 'device_ms') * 1e3 for s in small], '.1f')} µs"
                  for p in paths))
print("    splits a row: " + ", ".join(
    f"{p} {span([kernel_splits(s, p) for s in small], 'd')}" for p in OURS)
      + f"; {DEFAULT} tokens a split {span([split_tokens(s) for s in small], 'd')}")
for p in OURS:
    print(f"    {p}: a Gluon stage 1 at {sum(gluon_stage1(s, p) for s in small)} of "
          f"{len(small)} (" + ", ".join(f"{name(s)} {stage1_tiles(s, p)} {split_tokens(s, p)}"
                                        for s in small if gluon_stage1(s, p))
          + " tokens a split)")
print()
display(heatmap_figure(results, paths, "device_pct_of_floor",
                       "% of the roofline floor, kernel time (100 = at the floor)",
                       ratio=False))
""",
    ),
    (
        "md",
        r"""
## Against vLLM's kernels

Speed-up = vLLM's kernel time / ours, at the same shape in the same bench process (> 1:
ours is faster; for the XLA paths, a part of the df8ad0c sweep); vLLM's includes the two
small torch fills around its kernels.

- **Occupancy splits (the default) are faster than vLLM's kernels at all 68 shapes,
  2.42–9.82×:** 4.10–9.82× at the 25 shapes where stage 1 is the Gluon seesaw,
  2.42–7.74× at the 38 where it is the 16-bit 16-head Gluon kernel, 5.97–7.14× at the 5
  where it is the tl kernel (2.42–9.82× at the 18 where stage 1 runs alone: one split a
  row, or two merged in a cluster). By head count: 2.42–7.14× at H=16, 3.05–7.74× at
  H=32, 3.59–8.42× at H=64, 4.10–9.82× at H=128.
- **The largest: 128/128/16384, 1.0006 against vLLM's 9.8289 ms (9.82×);**
  64/128/16384 is 0.5208 against 4.7697 ms (9.16×) and 64/128/4096 0.1340 against
  1.2155 ms (9.07×), all three with one split a row.
- **The closest: 128/16/1024, 0.0401 against 0.0969 ms (2.42×),** then 64/16/4096
  (0.0762 against 0.1845 ms, 2.42×) and 16/16/16384 (0.0763 against 0.1919 ms, 2.51×):
  H=16 shapes on the 16-bit 16-head Gluon kernel, 40–76 µs of kernel time, memory-bound
  shapes where vLLM's kernels reach about half the floor (47–49 %).
- At the small shapes (B ≤ 4, L ≤ 4k) the default path is 3.61–7.74× faster in kernel
  time (1/32/1024: 6.7 against 51.6 µs) and 1.42–2.53× in wall time, where the host
  sets our time but not that of vLLM's CUDA graph. Over all 68 shapes the wall-time range
  is 1.42–9.53×; its closest, 4/16/1024, runs 7.6 µs of kernels in 36.8 µs of wall
  time.
- Our kernels on vLLM's split rule (`triton`) were not timed in this sweep; their speed-up
  over vLLM's kernels, on the kernels of c11b1c4, is in
  `docs/benchmarks/c11b1c4/results.json`.
- At H=128 with B ≥ 16, vLLM's kernels are at 8.1–8.9 % of the floor; even plain JAX
  gather + einsum is 1.70–2.19× faster there, and it beats vLLM's kernels at 46 of the
  68 shapes (its times from the df8ad0c sweep, against that sweep's run of vLLM's
  kernels, whose kernel times are within 1.8 % of this one's).
""",
    ),
    (
        "code",
        r"""
if "vllm" not in paths:
    print("vLLM's kernels were not timed in this sweep")
else:
    rivals = [p for p in paths if p != "vllm"]
    print(f"{'B':>4} {'H':>4} {'L':>6} {'vLLM ms':>9} " + " ".join(f"{p:>16}" for p in rivals)
          + "   (speed-up over vLLM's kernels, kernel time)")
    for s in results["shapes"]:
        print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} {metric(s, 'vllm', 'device_ms'):>9.4f} "
              + " ".join(f"{fmt(metric(s, p, 'device_speedup_vs_vllm'), '.2f', suffix='×'):>16}"
                         for p in rivals))
    print()

    def versus(s, p, u):
        return (f"{name(s)} {u:.2f}× ({metric(s, p, 'device_ms'):.4f} against "
                f"{metric(s, 'vllm', 'device_ms'):.4f} ms)")

    for p in OURS:
        ups = [(s, metric(s, p, "device_speedup_vs_vllm")) for s in results["shapes"]]
        ups = sorted(((s, u) for s, u in ups if u is not None), key=lambda su: su[1])
        print(f"{p}: faster than vLLM's kernels at {sum(u > 1 for _, u in ups)} of {len(ups)} "
              f"shapes, {span([u for _, u in ups])}×; by H: "
              + ", ".join(f"H={h} {span([u for s, u in ups if s['H'] == h])}×"
                          for h in sorted({s["H"] for s, _ in ups})))
        print("    closest: " + "; ".join(versus(s, p, u) for s, u in ups[:3]))
        print("    largest: " + "; ".join(versus(s, p, u) for s, u in ups[-3:]))
    ups = [(s, metric(s, DEFAULT, "device_speedup_vs_vllm")) for s in results["shapes"]]
    print(f"{DEFAULT} by stage 1: " + "; ".join(
        f"{kind} at {sum(stage1(s) == kind for s, _ in ups)} shapes "
        f"{span([u for s, u in ups if stage1(s) == kind])}×"
        for kind in ("seesaw", "h16", "tl"))
          + f"; stage 1 alone at {sum(per_call(s, DEFAULT) == 1 for s, _ in ups)} shapes "
          f"{span([u for s, u in ups if per_call(s, DEFAULT) == 1])}×")
    print(f"{DEFAULT} at B<=4, L<=4k: kernel time "
          f"{span([metric(s, DEFAULT, 'device_speedup_vs_vllm') for s in small])}×, wall time "
          f"{span([metric(s, DEFAULT, 'speedup_vs_vllm') for s in small])}×")
    wall = sorted(results["shapes"], key=lambda s: metric(s, DEFAULT, "speedup_vs_vllm"))
    print(f"{DEFAULT} in wall time: "
          f"{span([metric(s, DEFAULT, 'speedup_vs_vllm') for s in wall])}×; closest "
          f"{name(wall[0])}, {metric(wall[0], DEFAULT, 'device_ms') * 1e3:.1f} µs "
          f"kernel time, {metric(wall[0], DEFAULT, 'ms') * 1e3:.1f} µs wall time")
    h128 = [s for s in results["shapes"] if s["H"] == 128 and s["B"] >= 16]
    if "dense" in rivals:
        dense = [metric(s, "dense", "device_speedup_vs_vllm") for s in results["shapes"]]
        print(f"H=128, B>=16: vLLM's kernels at "
              f"{span([metric(s, 'vllm', 'device_pct_of_floor') for s in h128], '.1f')} % of "
              f"the floor, dense "
              f"{span([metric(s, 'dense', 'device_speedup_vs_vllm') for s in h128])}× faster; "
              f"dense faster than vLLM's kernels at {sum(u > 1 for u in dense)} shapes")
    display(heatmap_figure(results, rivals, "device_speedup_vs_vllm",
                           "speed-up over vLLM's kernels, kernel time (>1: faster)",
                           ratio=True))
""",
    ),
    (
        "md",
        r"""
## Occupancy splits against vLLM's split rule

vLLM's kernels take their split count from vLLM's rule, which picks it from the length
alone: next_pow2(L / 512), at most 2 per SM, so 2 splits at 1k, 32 at 16k and 128 at 64k
whatever the batch; its splits hold 512 tokens. The occupancy rule of the default path
(`mla_jax.splits.occupancy_kv_splits`) also looks at the batch and the head tiles: enough
(row, head tile, split) programs for one wave (two per SM with 16-head tiles, one with
32- or 64-head tiles), about 64 tokens per split at least, 128 splits at most. At B ≤ 4
that gives 8–128 splits where vLLM's rule gives 2–128, to fill the GPU; at B ≥ 64 it
gives 1–4 against 2–32, which saves writing and merging partial outputs (stage 2 is not
launched at the 15 shapes whose stage 1 runs one split, where stage 1 writes the output:
12 by the rule, and 128/16 at every L, where the 16-bit 16-head Gluon kernel halves the
rule's two; nor at the 3 whose two splits on the seesaw a cluster merges) and makes the
splits longer: 512–16384 tokens at H ≥ 32, against vLLM's 512. The two rules pick the
same split count at 10 shapes, all with 512-token splits: the default path runs the
seesaw at the four with H=64 and the 16-bit 16-head kernel at the other six: on one
32-head tile at the four with H=32, and at 1/16/65536 and 128/16/1024 (there at half the
count: one split of 1024 tokens). The default path's stage 1 runs the occupancy rule's
count at 50 of the 68 shapes and half of it at the other 18, where the 16-bit 16-head
kernel halves it (12 with H=16, 3 with H=32, 3 with H=64).

Our kernels on vLLM's split rule (the `triton` path) were not timed in this sweep, so the
cell below prints the two rules' split counts beside the default path's kernel time, and
no comparison of the two rules on our kernels; that comparison, in kernel and wall time
on the kernels of c11b1c4, is in `docs/benchmarks/c11b1c4/results.json`. Where a sweep
times `triton`, the cell prints it and draws its heat map.
""",
    ),
    (
        "code",
        r"""
SM = machine["sm_count"]
rule, occ = "triton", DEFAULT
timed = rule in paths  # our kernels on vLLM's split rule, timed in this sweep or not


def over_vllm_rule(s, p, key="device_ms"):
    # Speed-up of path p over our kernels on vLLM's split rule (> 1: p is faster).
    mine, theirs = metric(s, p, key), metric(s, rule, key)
    return None if mine is None or theirs is None else theirs / mine


rows = [(s, occupancy_kv_splits(s["B"], s["H"], s["L"], SM), over_vllm_rule(s, occ))
        for s in results["shapes"]]
print(f"{'B':>4} {'H':>4} {'L':>6}  {'splits: vLLM rule':>17} {'occupancy':>9}  "
      f"{'ms: vLLM rule':>13} {'occupancy':>9}  {'speed-up':>8}  (kernel time)")
for s, splits, up in rows:
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6}  {s['num_kv_splits']:>17} {splits:>9}  "
          f"{fmt(metric(s, rule, 'device_ms'), '.4f'):>13} "
          f"{fmt(metric(s, occ, 'device_ms'), '.4f'):>9}  {fmt(up, '.2f', suffix='×'):>8}")
print(f"\nthe occupancy rule's count is the one {occ} ran at "
      f"{sum(n == kernel_splits(s, occ) for s, n, _ in rows)} of {len(rows)} shapes (the "
      f"16-bit 16-head Gluon kernel halves it at "
      f"{sum(n != kernel_splits(s, occ) for s, n, _ in rows)})")
for label, pick in [("B<=4", lambda s: s["B"] <= 4), ("B>=64", lambda s: s["B"] >= 64)]:
    print(f"{label}: splits a row, vLLM rule "
          f"{span([s['num_kv_splits'] for s, _, _ in rows if pick(s)], 'd')}, occupancy "
          f"{span([n for s, n, _ in rows if pick(s)], 'd')}")
print(f"H>=32, B>=64: occupancy tokens a split "
      f"{span([split_tokens(s) for s, _, _ in rows if s['H'] >= 32 and s['B'] >= 64], 'd')}")
same_count = [s for s, n, _ in rows if n == s["num_kv_splits"]]
print(f"same split count at {len(same_count)} shapes, stage 1 on the default path: "
      + ", ".join(f"{name(s)} {stage1_tiles(s)} ({split_tokens(s)} tokens a split)"
                  for s in same_count))
if not timed:
    print(f"\n{rule} (our kernels on vLLM's split rule) was not timed in this sweep; its "
          "latest numbers: ../docs/benchmarks/c11b1c4/results.json")
else:
    rows = [r for r in rows if r[2] is not None]
    same = [up for s, n, up in rows if n == s["num_kv_splits"]]
    diff = [(s, up) for s, n, up in rows if n != s["num_kv_splits"]]
    print(f"\noccupancy faster at {sum(up > 1 for _, _, up in rows)} of {len(rows)} shapes; "
          f"same split count at {len(same)} ({span(same, '.3f')}×); where they differ, faster "
          f"at {sum(up > 1 for _, up in diff)} of {len(diff)} "
          f"({span([up for _, up in diff if up > 1])}×), slower at "
          + ", ".join(f"{name(s)} ({metric(s, occ, 'device_ms') * 1e3:.1f} against "
                      f"{metric(s, rule, 'device_ms') * 1e3:.1f} µs, {up:.3f}×)"
                      for s, up in diff if up <= 1))
    print("largest: " + ", ".join(f"{name(s)} {up:.2f}×"
                                  for s, up in sorted(diff, key=lambda su: su[1])[-4:]))

    def both_seesaw(s):
        return gluon_stage1(s, occ) and gluon_stage1(s, rule)

    gluon_diff = [up for s, up in diff if both_seesaw(s)]
    print(f"where both rules run the Gluon kernel: "
          f"{span([up for s, _, up in rows if both_seesaw(s)])}×; where they do and the "
          f"counts differ: {span(gluon_diff)}× ({len(gluon_diff)} shapes; "
          + ", ".join(f"{label} {span(ups)}× ({len(ups)})" for label, ups in [
              ("H>=64", [up for s, up in diff if both_seesaw(s) and s["H"] >= 64]),
              ("H=32", [up for s, up in diff if both_seesaw(s) and s["H"] == 32])]) + ")")
    walls = [(s, n, over_vllm_rule(s, occ, "ms")) for s, n, _ in rows]
    print(f"wall time: faster at {sum(up > 1 for _, _, up in walls)}; slower at "
          + ", ".join(f"{name(s)} ({up:.2f}×, kernels {over_vllm_rule(s, occ):.2f}×, "
                      f"{metric(s, occ, 'ms') * 1e3:.1f} µs"
                      + (", same split count)" if n == s["num_kv_splits"] else ")")
                      for s, n, up in walls if up <= 1))

    display(heatmap_figure(results, [occ], over_vllm_rule,
                           "speed-up of occupancy splits over vLLM's split rule\n"
                           "(kernel time, >1: faster)", ratio=True))
""",
    ),
    (
        "md",
        r"""
## Wall time against kernel time

The wall clock is what a caller that dispatches ten chained runs per sync sees; the kernel
time is what the GPU spends in the path's kernels. Where the kernels take 40 µs a call or
more, the two agree: the default path's wall time is 0.96–1.17× its kernel time there (32
shapes; the 0.96 at 64/128/16384 and 128/64/16384, below), 0.96–1.07× at the 15 shapes
of 100 µs or more, and vLLM's CUDA graph reads 1.00–1.04× at all 68. Below that the
host's dispatch sets the JAX paths' wall time: the default path reads 19.36–39.99 µs at
its 31 shapes under 40 µs of wall time, whose kernels take 6.7–33.9 µs (up to 4.85×
apart, at 4/16/1024); the wall time of `dense` never reads below 28.5 µs, that of `xla`
never below 34.3 µs. Those wall times move from run to run (see the top of the
notebook), and their three repeats within this sweep spread by up to 82 % on the default
path.

The two instruments come from different runs, so at a shape whose clock varies the kernel
time can read above the wall time: here by 4.0 % at 64/128/16384 (0.5208 ms of kernels
against 0.5006 ms of wall time), 4.0 % at 128/64/16384 (0.6032 against 0.5799 ms) and
2.4 % at 128/128/4096 (0.2790 against 0.2725 ms); all three with one split a row, stage
1 alone.
""",
    ),
    (
        "code",
        r"""
def wall_over_kernel(s, p):
    wall, kern = metric(s, p, "ms"), metric(s, p, "device_ms")
    return None if wall is None or kern is None else wall / kern


print(f"{'B':>4} {'H':>4} {'L':>6} " + " ".join(f"{p:>22}" for p in paths)
      + "   (wall ms per call, and wall / kernel time)")
for s in results["shapes"]:
    print(f"{s['B']:>4} {s['H']:>4} {s['L']:>6} " + " ".join(
        f"{fmt(metric(s, p, 'ms'), '.4f') + ' (' + fmt(wall_over_kernel(s, p), '.2f') + ')':>22}"
        for p in paths))
print()
for p in paths:
    timed = [s for s in results["shapes"] if wall_over_kernel(s, p) is not None]
    slow = [s for s in timed if metric(s, p, "device_ms") >= 0.04]
    slower = [s for s in timed if metric(s, p, "device_ms") >= 0.1]
    fast = [s for s in timed if metric(s, p, "ms") < 0.04]
    line = (f"{p}: wall / kernel {span([wall_over_kernel(s, p) for s in slow])} at "
            f"{len(slow)} shapes of >= 40 µs kernel time, "
            f"{span([wall_over_kernel(s, p) for s in slower])} at {len(slower)} of >= 100 µs; "
            f"wall time never below {min(metric(s, p, 'ms') for s in timed) * 1e3:.1f} µs")
    if fast:
        worst = max(fast, key=lambda s: wall_over_kernel(s, p))
        repeats = [metric(s, p, "times_ms") for s in fast]
        line += (f"; {len(fast)} shapes under 40 µs of wall time: wall "
                 f"{span([metric(s, p, 'ms') * 1e3 for s in fast])} µs, kernels "
                 f"{span([metric(s, p, 'device_ms') * 1e3 for s in fast], '.1f')} µs, "
                 f"up to {wall_over_kernel(worst, p):.2f}× at {name(worst)}; repeats spread "
                 f"up to {max(max(r) / min(r) - 1 for r in repeats):.0%}")
    print(line)
print(f"\n{DEFAULT}, kernel time above wall time (ms): " + ", ".join(
    f"{name(s)} {metric(s, DEFAULT, 'device_ms'):.4f} against {metric(s, DEFAULT, 'ms'):.4f}"
    f" ({1 / wall_over_kernel(s, DEFAULT) - 1:+.1%}"
    + (", stage 1 alone)" if per_call(s, DEFAULT) == 1 else ")")
    for s in results["shapes"] if (wall_over_kernel(s, DEFAULT) or 1) < 1))
display(heatmap_figure(results, [DEFAULT, "vllm"] if "vllm" in paths else [DEFAULT],
                       lambda s, p: (None if wall_over_kernel(s, p) is None
                                     else 100 / wall_over_kernel(s, p)),
                       "kernel time as % of wall time (100: the GPU sets the wall time)",
                       ratio=False))
""",
    ),
    (
        "md",
        r"""
## Re-measure on this machine

With a CUDA GPU visible to JAX, this runs a small live sweep through `mla_jax.tools.bench.main`
(B ∈ {1, 64}, H ∈ {16, 128}, L ∈ {4k, 16k}; our two Triton paths, the default and `triton`,
which the committed sweep did not time, and vLLM's kernels side by side when
`mla_jax.tools.vllm_kernel.load()` finds its file, see `docs/vllm_kernel.md`) into a
temporary folder, and draws it like the committed sweep, in kernel time where the run
traced it. On an sm_90 GPU our stage 1 is the Gluon seesaw at the H=128 shapes on both
rules (on the default path at B=64 with one split a row, where stage 1 runs alone) but
at 1/128/4096 on the default path, where it is the 16-bit 16-head Gluon kernel on four
32-head tiles a row (32 splits of 128 tokens); at H=16 it is the 16-bit 16-head Gluon
kernel on the default path (at B=64 with half the rule's splits) but at 1/16/4096
(64-token splits), and the tl kernel on vLLM's rule.
Without a CUDA GPU it says it skipped.
""",
    ),
    (
        "code",
        r"""
import tempfile

import jax

if any(d.platform == "gpu" for d in jax.devices()):
    from mla_jax.tools import bench

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "live"
        bench.main(["--batch", "1,64", "--heads", "16,128", "--lens", "4096,16384",
                    "--paths", "triton,triton-occupancy,vllm", "--repeats", "3",
                    "--time-budget", "240", "--out", str(out)])
        live = json.loads((out / "results.json").read_text())
    live_paths = timed_paths(live)
    if not live_paths:
        print("the live sweep timed no path")
    else:
        # Kernel time where the run traced every path, else wall time.
        traced = all(metric(s, p, "device_ms") is not None
                     for s in live["shapes"] for p in live_paths if metric(s, p, "ms"))
        prefix, what = ("device_", "kernel time") if traced else ("", "wall time")
        display(time_vs_len_figure(live, live_paths, key=f"{prefix}ms",
                                   title=f"live sweep, {what}, {live['machine']['device']}"))
        display(heatmap_figure(live, live_paths, f"{prefix}pct_of_floor",
                               f"live sweep: % of the roofline floor ({what})", ratio=False))
        if "vllm" in live_paths and len(live_paths) > 1:
            display(heatmap_figure(live, [p for p in live_paths if p != "vllm"],
                                   f"{prefix}speedup_vs_vllm",
                                   f"live sweep: speed-up over vLLM's kernels ({what}, "
                                   ">1: faster)", ratio=True))
else:
    print(f"no CUDA GPU visible to JAX ({jax.devices()}): skipped the live sweep")
""",
    ),
]


def build_notebook() -> nbformat.NotebookNode:
    cells = []
    for i, (kind, text) in enumerate(CELLS):
        make = new_markdown_cell if kind == "md" else new_code_cell
        cells.append(make(text.strip("\n"), id=f"perf-{i:02d}"))  # stable ids: stable diffs
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nb


def main() -> None:
    nbformat.write(build_notebook(), NOTEBOOK)
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
