"""Every stage-1 and stage-2 choice of a Triton decode step, made in one place.

``plan`` takes the step's static description (``Problem``: shapes, strides, dtypes,
the split count the buffer's rule planned, the device's compute capability) and
returns a frozen ``Plan``: which stage-1 kernel runs (``Plan.family``), its head tile,
the split count it runs at (the rule's, or fewer: ``Plan.split_divisor``), and both
stages' launches (grid, warps, stages, cluster, constexprs). ``mla_jax._triton_backend``
launches what the plan says and decides nothing. The measured bounds the choice reads
are a table, ``mla_jax._tiling.THRESHOLDS``; the tl kernels' own tile and launch
options are ``kernels.stage1_config`` and ``kernels.stage2_tiling`` (which the
Triton interpreter runs without this module).

Stage 1 is one of:

* ``"tl"``: ``kernels.mla_decode_stage1``, any GPU, any problem.
* ``"seesaw"``: the 64-head Gluon kernel (sm_90, a 16-bit cache of q's dtype from 32
  heads or an fp8 one from 64), in splits of at least ``SEESAW_MIN_SPLIT_TOKENS``.
* ``"narrow"``: the 16-bit Gluon kernel with tokens on the MMA's M and heads on its N,
  16 or 32 heads a tile (its Triton name, ``mla_decode_stage1_gluon_h16``, is from its
  first tile): at 16 heads, and where the step's tokens are known at trace time at 32,
  64 and 128 heads in small steps.
* ``"fp8_narrow"``: the same shape for an fp8 cache under 64 heads (16-head tiles).
* ``"fp8_mma"``: where asked (``fp8_mma``), an fp8 cache from 64 heads, e4m3 MMAs.

A traced ``max_seq_len`` leaves ``batch_tokens`` None (the step's tokens are unknown at
trace time): then the tl stage 1 takes its default head tile, not the 16-head one of
small steps, and the 16-bit narrow kernel runs only at 16 heads (where it needs no
step size); the fp8 kernels and the seesaw are chosen alike
(``tests/kernels/test_plan.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

import triton

from mla_jax import _tiling, kernels
from mla_jax.gluon import BLOCK_H, BLOCK_N, FP8, LORA, ROPE, SMALL_BLOCK_H

SEESAW_MIN_SPLIT_TOKENS = _tiling.THRESHOLDS["SEESAW_MIN_SPLIT_TOKENS"].value
FP8_NARROW_MIN_SPLIT_TOKENS = _tiling.THRESHOLDS["FP8_NARROW_MIN_SPLIT_TOKENS"].value
NARROW_MIN_SPLIT_TOKENS = _tiling.THRESHOLDS["NARROW_MIN_SPLIT_TOKENS"].value
NARROW_MANY_TILES_MIN_SPLIT_TOKENS = _tiling.THRESHOLDS["NARROW_MANY_TILES_MIN_SPLIT_TOKENS"].value
NARROW_WIDE_TILE_MIN_SPLIT_TOKENS = _tiling.THRESHOLDS["NARROW_WIDE_TILE_MIN_SPLIT_TOKENS"].value
NARROW_BATCH_TOKENS = _tiling.THRESHOLDS["NARROW_BATCH_TOKENS"].value
NARROW_128_HEADS_BATCH_TOKENS = _tiling.THRESHOLDS["NARROW_128_HEADS_BATCH_TOKENS"].value

# The seesaw is launched with its default partition's 4 warps, and its build adds the
# worker's 4 (its metadata says 8).
SEESAW_NUM_WARPS = 4
NARROW_NUM_WARPS = 4  # one warpgroup
FP8_MMA_NUM_WARPS = 8  # two warpgroups, no specialisation
SIXTEEN_BIT = ("bfloat16", "float16")
# The tl stage 1's constexprs that are its own choices (tiling, precision, the
# partials' dtype), not the problem's: a Gluon kernel makes its own or has none.
_TL_CHOICES = (
    "BLOCK_H",
    "BLOCK_N",
    "DOT_PRECISION",
    "PAGED_LOADS",
    "LORA_CHUNKS",
    "BF16_PARTIALS",
)
_CP_ASYNC_BYTES = 16

# Each Gluon family's stage 1 as (module, kernel name). A module is imported when its
# family is first planned: defining its kernels parses their sources, which a process
# that runs one family need not pay for the others (tens of ms at the first call).
GLUON_KERNELS = {
    "seesaw": ("mla_jax.gluon.seesaw", "mla_decode_stage1_gluon_seesaw"),
    "narrow": ("mla_jax.gluon.narrow", "mla_decode_stage1_gluon_h16"),
    "fp8_narrow": ("mla_jax.gluon.narrow", "mla_decode_stage1_gluon_fp8_h16"),
    "fp8_mma": ("mla_jax.gluon.fp8_mma", "mla_decode_stage1_gluon_fp8_mma"),
}
# The family of each stage-1 kernel, by its name.
FAMILIES = {"mla_decode_stage1": "tl"} | {name: f for f, (_, name) in GLUON_KERNELS.items()}


def gluon_family_kernel(family: str) -> Any:
    """The ``@gluon.jit`` stage 1 of a Gluon family (``GLUON_KERNELS``)."""
    module, name = GLUON_KERNELS[family]
    return getattr(importlib.import_module(module), name)


# ``Problem``'s fields that the kernel choice reads but ``kernels.launch_params`` does
# not take (``grid_splits`` it takes after the choice divided it).
_PLAN_ONLY = {
    "grid_splits",
    "q_dtype",
    "kv_dtype",
    "compute_capability",
    "max_tokens",
    "batch_tokens",
    "occupancy_sms",
    "fp8_mma",
    "cluster_merge",
    "config",
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """A step as the plan sees it: all static (element strides, dtype names).

    ``grid_splits``: the split count the buffer's rule planned; ``max_tokens``: the
    most tokens a row holds as known at trace time (a static ``max_seq_len``, else
    the block table's capacity); ``batch_tokens``: the rows times ``max_tokens`` where
    the split count was planned with them, else None; ``occupancy_sms``: the SM count
    the occupancy rule planned for (None: another rule's count, taken as it is);
    ``config``: overrides of ``kernels.stage1_config`` (tuning sweeps: the tl stage 1
    then); ``cluster_merge``: False keeps stage 2 where the seesaw's cluster would
    merge a row's two splits (A/B runs)."""

    batch: int
    num_heads: int
    num_pages: int
    page_size: int
    pages_per_seq: int
    kv_lora_rank: int
    rope_dim: int
    scale: float
    grid_splits: int
    q_nope_strides: tuple[int, ...]
    q_pe_strides: tuple[int, ...]
    qp_offset: int
    kv_strides: tuple[int, ...]
    block_table_strides: tuple[int, ...]
    buffer_strides: tuple[int, ...]
    q_dtype: str
    kv_dtype: str
    compute_capability: int
    max_tokens: int
    batch_tokens: int | None = None
    occupancy_sms: int | None = None
    fp8_mma: bool = False
    cluster_merge: bool = True
    config: tuple[tuple[str, int], ...] | None = None

    @classmethod
    def on_sm90(
        cls,
        *,
        q_dtype: str,
        kv_dtype: str | None = None,
        batch_tokens: int | None = None,
        fp8_mma: bool = False,
        cluster_merge: bool = True,
        **launch_problem: Any,
    ) -> Problem:
        """The problem of ``kernels.launch_params``' keywords on sm_90, its rows as
        long as the block table holds (``kv_dtype`` None: a cache of q's dtype): what
        the tools and tests that launch a Gluon stage 1 themselves plan with."""
        return cls(
            **launch_problem,
            q_dtype=q_dtype,
            kv_dtype=kv_dtype or q_dtype,
            compute_capability=90,
            max_tokens=launch_problem["pages_per_seq"] * launch_problem["page_size"],
            batch_tokens=batch_tokens,
            fp8_mma=fp8_mma,
            cluster_merge=cluster_merge,
        )

    def launch_problem(self, grid_splits: int) -> dict[str, Any]:
        """``kernels.launch_params``' problem keywords at ``grid_splits``."""
        names = [f.name for f in dataclasses.fields(self) if f.name not in _PLAN_ONLY]
        return {n: getattr(self, n) for n in names} | {"grid_splits": grid_splits}


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel's launch: a cluster's CTAs lie along x of ``grid``."""

    kernel: Any
    grid: tuple[int, int, int]
    num_warps: int
    num_stages: int
    constexprs: Mapping[str, Any]
    cluster: int = 1


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a step runs. ``grid_splits`` is the rule's count over ``split_divisor``
    (the run-time split count is divided alike); ``stage2`` is None where stage 1
    writes the output itself (one split, or the seesaw's two-split cluster)."""

    family: str
    head_tile: int
    split_divisor: int
    grid_splits: int
    bf16_partials: bool
    stage1: Launch
    stage2: Launch | None


def supports(problem: Problem) -> bool:
    """Whether a Gluon kernel handles the problem (else the tl one).

    q 16-bit, and the cache either of q's dtype or ``float8_e4m3fn``. Pages must hold
    whole 64-token blocks, and each latent row must start 16-byte aligned
    (``cp.async``, TMA and the fp8 loads move 16 bytes); the last dimension is assumed
    contiguous, and a 16-bit cache's pages back to back. Heads: on an fp8 cache at
    least ``SMALL_BLOCK_H``; on a 16-bit one ``SMALL_BLOCK_H`` (the narrow kernel, whose
    split count ``split_divisor`` halves: at 17-31 heads the tl kernel's 32-head tile
    is already one program an SM, so there is no count to halve) or at least
    ``BLOCK_H // 2`` (a seesaw tile of 32-63 heads masks the rest of its 64 rows and
    still beats the tl kernel's tile)."""
    kv_dtype, q_dtype = problem.kv_dtype, problem.q_dtype
    if q_dtype not in SIXTEEN_BIT or kv_dtype not in (q_dtype, FP8):
        return False
    kv_page_stride, kv_row_stride = problem.kv_strides[:2]
    per_copy = _CP_ASYNC_BYTES // (1 if kv_dtype == FP8 else 2)  # elements in 16 bytes
    heads = problem.num_heads
    if kv_dtype == FP8:
        heads_ok = heads >= SMALL_BLOCK_H
    else:
        heads_ok = heads == SMALL_BLOCK_H or heads >= BLOCK_H // 2
    return (
        heads_ok
        and problem.page_size % BLOCK_N == 0
        and problem.kv_lora_rank == LORA
        and problem.rope_dim == ROPE
        and kv_row_stride % per_copy == 0
        and kv_page_stride % per_copy == 0
        # The seesaw's TMA descriptors see the cache as rows of tokens.
        and (kv_dtype == FP8 or kv_page_stride == problem.page_size * kv_row_stride)
    )


def runs_narrow(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> bool:
    """Whether a narrow kernel (tokens on the MMAs' M, 16 or 32 heads a tile) is the
    Gluon stage 1: on an fp8 cache (``kv_dtype`` a name) under ``BLOCK_H`` heads; on a
    16-bit one (its name, or None) under ``BLOCK_H // 2`` heads, and where
    ``batch_tokens`` is known at exactly ``BLOCK_H // 2`` heads, at ``BLOCK_H`` in a
    step of at most ``NARROW_BATCH_TOKENS`` tokens and at ``2 * BLOCK_H`` in one of at
    most ``NARROW_128_HEADS_BATCH_TOKENS``."""
    if kv_dtype == FP8:
        return num_heads < BLOCK_H
    if num_heads < BLOCK_H // 2:
        return True
    if batch_tokens is None:
        return False
    if num_heads == BLOCK_H // 2:
        return True
    if num_heads == BLOCK_H:
        return batch_tokens <= NARROW_BATCH_TOKENS
    return num_heads == 2 * BLOCK_H and batch_tokens <= NARROW_128_HEADS_BATCH_TOKENS


def narrow_tile(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> int:
    """A narrow kernel's heads a tile (where ``runs_narrow``): on a 16-bit cache
    ``BLOCK_H // 2`` from that many heads on (one 32-head tile a row at 32 heads, two
    at 64, four at 128), but ``SMALL_BLOCK_H`` at 32 heads in a step of at most
    ``NARROW_BATCH_TOKENS`` tokens (two 16-head tiles a row); on an fp8 cache and under
    32 heads ``SMALL_BLOCK_H``."""
    if kv_dtype == FP8 or num_heads < BLOCK_H // 2:
        return SMALL_BLOCK_H
    two_small = num_heads == BLOCK_H // 2 and (
        batch_tokens is None or batch_tokens <= NARROW_BATCH_TOKENS
    )
    return SMALL_BLOCK_H if two_small else BLOCK_H // 2


def split_divisor(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> int:
    """How many times fewer splits than the occupancy rule plans the Gluon stage 1 may
    need: for the 16-bit narrow kernel, which holds one CTA an SM (168-189 KB of shared
    memory), the waves its grid takes where the rule's grid fills one (the rule counts
    the tl kernel's tile, two 16-head programs an SM or one wider one): its tiles a row
    times the rule's programs an SM over the rule's tiles a row; 2 at 16 heads, at 32
    with 16-head tiles and at 64 above ``SMALL_BATCH_TOKENS`` tokens, else 1. 1 for the
    other kernels (the seesaw's 64-head tile is the rule's; the fp8 narrow kernel holds
    two CTAs an SM)."""
    if kv_dtype == FP8 or not runs_narrow(kv_dtype, num_heads, batch_tokens):
        return 1
    tiles = -(-num_heads // narrow_tile(kv_dtype, num_heads, batch_tokens))
    resident = _tiling.programs_per_sm(num_heads, batch_tokens)
    return max(1, tiles * resident // _tiling.head_tiles(num_heads, batch_tokens))


def gluon_family(
    kv_dtype: str | None,
    num_heads: int = BLOCK_H,
    fp8_mma: bool = False,
    batch_tokens: int | None = None,
) -> str:
    """The Gluon family for a cache of dtype ``kv_dtype`` (a name; None: 16-bit): the
    fp8-MMA kernel where asked on an fp8 cache from ``BLOCK_H`` heads (under that the
    fp8 narrow kernel's tile, which multiplies in fp16, is the one that fits), a narrow
    kernel where ``runs_narrow``, else the seesaw."""
    if fp8_mma and kv_dtype == FP8 and num_heads >= BLOCK_H:
        return "fp8_mma"
    if runs_narrow(kv_dtype, num_heads, batch_tokens):
        return "fp8_narrow" if kv_dtype == FP8 else "narrow"
    return "seesaw"


def gluon_kernel(
    kv_dtype: str | None,
    num_heads: int = BLOCK_H,
    fp8_mma: bool = False,
    batch_tokens: int | None = None,
) -> Any:
    """The Gluon stage 1 of ``gluon_family``'s choice."""
    return gluon_family_kernel(gluon_family(kv_dtype, num_heads, fp8_mma, batch_tokens))


def _min_split_tokens(kv_dtype: str, num_heads: int, batch_tokens: int | None) -> int:
    """The fewest tokens a split that the Gluon stage 1 runs (the table's rows)."""
    if not runs_narrow(kv_dtype, num_heads, batch_tokens):
        return SEESAW_MIN_SPLIT_TOKENS
    if kv_dtype == FP8:
        return FP8_NARROW_MIN_SPLIT_TOKENS
    tile = narrow_tile(kv_dtype, num_heads, batch_tokens)
    if num_heads > tile:
        return NARROW_MANY_TILES_MIN_SPLIT_TOKENS
    if tile > SMALL_BLOCK_H:
        return NARROW_WIDE_TILE_MIN_SPLIT_TOKENS
    return NARROW_MIN_SPLIT_TOKENS


def gluon_split_divisor(problem: Problem, batch_tokens: int | None) -> int | None:
    """None where stage 1 runs as the tl kernel; else it runs as a Gluon kernel at
    ``grid_splits`` divided by the returned count.

    A Gluon kernel needs an sm_90 build, a problem it ``supports``, and splits of at
    least ``_min_split_tokens`` when a row holds ``max_tokens``. The 16-bit narrow
    kernel runs only on an occupancy rule's count (planned for ``occupancy_sms`` SMs);
    where the rule's grid takes its programs in twice the waves it planned
    (``split_divisor``), and they exceed one an SM, at half the count (``grid_splits``
    at least 2: as many waves as the rule planned), else at the count itself (already
    one wave: the rule capped it). At twice the programs an SM fits, or under vLLM's
    rule, it is not the faster one. Its 32-head tiles, several a row, do not run where
    the rule planned 16-head programs two an SM but its grid holds no more than SMs:
    there the tl kernel's programs, each on an SM of its own, are faster."""
    num_heads, kv_dtype = problem.num_heads, problem.kv_dtype
    grid_splits, occupancy_sms = problem.grid_splits, problem.occupancy_sms
    divisor = split_divisor(kv_dtype, num_heads, batch_tokens)
    narrow = runs_narrow(kv_dtype, num_heads, batch_tokens)
    tile = narrow_tile(kv_dtype, num_heads, batch_tokens)
    min_tokens = _min_split_tokens(kv_dtype, num_heads, batch_tokens)
    if (
        narrow
        and num_heads > tile > SMALL_BLOCK_H
        and _tiling.programs_per_sm(num_heads, batch_tokens) > 1
    ):
        rule_programs = problem.batch * _tiling.head_tiles(num_heads, batch_tokens) * grid_splits
        if occupancy_sms is None or rule_programs <= occupancy_sms:
            return None
    if divisor > 1:
        if occupancy_sms is None:
            return None
        programs = problem.batch * -(-num_heads // tile)
        if programs * grid_splits <= occupancy_sms:
            divisor = 1
        elif grid_splits < divisor:
            return None
    gluon = (
        problem.compute_capability == 90
        and -(-problem.max_tokens // (grid_splits // divisor)) >= min_tokens
        and supports(problem)
    )
    return divisor if gluon else None


def cluster_size(kernel: Any, grid_splits: int, merge: bool = True) -> int:
    """The CTAs of one cluster of the Gluon stage 1 ``kernel``: 2 where the seesaw runs
    a row in two splits, so that the pair merges them and no stage 2 runs; else 1.
    Rows of 4 or 8 splits as clusters ran 1.7-2x slower on the H200 (docs/performance.md,
    "A row's two splits merged in a cluster"). ``merge=False``: 1 (A/B runs)."""
    seesaw = FAMILIES[kernel.__name__] == "seesaw"
    return 2 if merge and seesaw and grid_splits == 2 else 1


def gluon_bf16_partials(q_dtype: str, kernel: Any, grid_splits: int, cluster: int) -> bool:
    """Whether the Gluon stage 1 ``kernel`` stores its partials in bf16 (its and stage
    2's ``BF16_PARTIALS``): where the tl stage 1 would (``kernels.bf16_partials``) and
    stage 2 merges them (no ``cluster``), on a kernel that has the constexpr (the
    seesaw, the 16-bit narrow kernel; the fp8 narrow and fp8-MMA kernels store float32)."""
    return (
        "BF16_PARTIALS" in kernel.arg_names
        and kernels.bf16_partials(q_dtype, grid_splits)
        and cluster == 1
    )


def _launch(params: dict, kernel: Any) -> Launch:
    return Launch(
        kernel=kernel,
        grid=tuple(params["grid"]),
        num_warps=params["num_warps"],
        num_stages=params["num_stages"],
        constexprs=params["constexprs"],
        cluster=params.get("cluster", 1),
    )


def gluon_stage1(problem: Problem, grid_splits: int, batch_tokens: int | None) -> dict:
    """The Gluon stage 1's launch at ``grid_splits``: the problem's constexprs are the
    tl stage 1's (one definition) less its own choices; a cluster's grid holds its
    CTAs along x."""
    tl_stage1, _ = kernels.launch_params(
        **problem.launch_problem(grid_splits), q_dtype=problem.q_dtype
    )
    heads, kv_dtype = problem.num_heads, problem.kv_dtype
    narrow = runs_narrow(kv_dtype, heads, batch_tokens)
    family = gluon_family(kv_dtype, heads, problem.fp8_mma, batch_tokens)
    kernel = gluon_family_kernel(family)
    cluster = cluster_size(kernel, grid_splits, problem.cluster_merge)
    half = gluon_bf16_partials(problem.q_dtype, kernel, grid_splits, cluster)
    block_h = narrow_tile(kv_dtype, heads, batch_tokens) if narrow else BLOCK_H
    if family == "fp8_mma":
        num_warps = FP8_MMA_NUM_WARPS
    else:
        num_warps = NARROW_NUM_WARPS if narrow else SEESAW_NUM_WARPS
    constexprs = {k: v for k, v in tl_stage1["constexprs"].items() if k not in _TL_CHOICES} | {
        "BLOCK_H": block_h,
        "BLOCK_N": BLOCK_N,
    }
    tiles = triton.cdiv(heads, block_h)
    if family == "seesaw":
        constexprs["CLUSTER"] = cluster
    if "BF16_PARTIALS" in kernel.arg_names:
        constexprs["BF16_PARTIALS"] = half
    if cluster > 1:
        grid = (tiles * cluster, problem.batch, 1)
    else:
        grid = (tiles, problem.batch, grid_splits)
    return {
        "family": family,
        "kernel": kernel,
        "grid": grid,
        "cluster": cluster,
        "bf16_partials": half,
        "num_warps": num_warps,
        "num_stages": 1,
        "constexprs": constexprs,
    }


def gluon_stage2(stage2: dict | None, stage1: dict) -> dict | None:
    """``kernels.launch_params``' stage 2 (None with one split) for the partials of the
    Gluon stage 1 ``stage1`` (``gluon_stage1``): None where its cluster merges the
    row's splits itself, ``BF16_PARTIALS`` where it stores them in bf16."""
    if stage2 is None or stage1["cluster"] > 1:
        return None
    flag = {"BF16_PARTIALS": stage1["bf16_partials"]}
    return stage2 | {"constexprs": stage2["constexprs"] | flag}


def plan(problem: Problem) -> Plan:
    """The step's kernels and launches (a pure function of ``problem``)."""
    # The 16-bit narrow kernel from 32 heads runs, as at 16, only on the occupancy
    # rule's count: its choice sees the step's tokens only there.
    gluon_tokens = None if problem.occupancy_sms is None else problem.batch_tokens
    divisor = None if problem.config is not None else gluon_split_divisor(problem, gluon_tokens)
    grid_splits = problem.grid_splits // (divisor or 1)
    stage1, stage2 = kernels.launch_params(
        **problem.launch_problem(grid_splits),
        q_dtype=problem.q_dtype,
        batch_tokens=problem.batch_tokens,
        config=None if problem.config is None else dict(problem.config),
    )
    if divisor is None:
        return Plan(
            family="tl",
            head_tile=stage1["constexprs"]["BLOCK_H"],
            split_divisor=1,
            grid_splits=grid_splits,
            bf16_partials=stage1["constexprs"]["BF16_PARTIALS"],
            stage1=_launch(stage1, kernels.mla_decode_stage1),
            stage2=None if stage2 is None else _launch(stage2, kernels.mla_decode_stage2),
        )
    gluon = gluon_stage1(problem, grid_splits, gluon_tokens)
    stage2 = gluon_stage2(stage2, gluon)
    return Plan(
        family=gluon["family"],
        head_tile=gluon["constexprs"]["BLOCK_H"],
        split_divisor=divisor,
        grid_splits=grid_splits,
        bf16_partials=gluon["bf16_partials"],
        stage1=_launch(gluon, gluon["kernel"]),
        stage2=None if stage2 is None else _launch(stage2, kernels.mla_decode_stage2),
    )
