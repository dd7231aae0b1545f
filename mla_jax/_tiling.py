"""How stage 1 groups query heads: shared by the kernels and the split policies.

No JAX: the kernel module and the split rules both read it, and so does the kernel
choice (``mla_jax.plan``), whose measured thresholds are the table here.
``head_tile`` is the one definition of the tile a step launches with; the kernel's
configuration (``kernels.stage1_config``) and the occupancy split rule
(``splits.occupancy_kv_splits``, which counts the programs a tile makes) both ask it.
"""

import dataclasses

MAX_HEAD_TILE = 64  # 64 heads x 576 bf16 fits shared memory next to a KV tile; 128 does not
MIN_HEAD_TILE = 16  # tl.dot needs at least 16 rows


@dataclasses.dataclass(frozen=True)
class Threshold:
    """One measured bound of the kernel choice (``mla_jax.plan``): its value, what it
    bounds, and the measurement that set it (docs/performance.md's section)."""

    value: int
    bounds: str
    measured: str


# Every threshold of the stage-1 choice, as data. Token counts are a split's tokens
# (``*_MIN_SPLIT_TOKENS``: the longest row over the split count) or a step's (rows
# times the longest row, known at trace time: ``*_BATCH_TOKENS``).
THRESHOLDS: dict[str, Threshold] = {
    # A wider tl tile's fixed cost per program outweighs its reuse of each latent tile
    # in small steps; past this the wider tile's warpgroup MMA wins.
    "SMALL_BATCH_TOKENS": Threshold(
        4096,
        "steps up to it run the tl stage 1 with 16-head tiles at any head count",
        "H200 A/B at the sweep's shapes, 0.52-0.81 of the 64-head tile's time at H 32-128"
        ' ("Head tiles and stage-1 configurations")',
    ),
    "SEESAW_MIN_SPLIT_TOKENS": Threshold(
        128,
        "the seesaw runs from splits of this many tokens (two 64-token blocks)",
        "gluon_check --crossover on the H200, both stages: 1.16-1.80x on a 16-bit cache at"
        ' 12 shapes, 1.45-2.03x on fp8 at 8 ("Gluon stage 1 (sm_90)", "The fp8 cache")',
    ),
    "FP8_NARROW_MIN_SPLIT_TOKENS": Threshold(
        64,
        "the fp8 16-head kernel runs from splits of this many tokens",
        "H200, both stages at one split count: 1.31-1.33x at 64 tokens a split, 1.50-1.82x"
        ' at 128 ("The fp8 cache")',
    ),
    "NARROW_MIN_SPLIT_TOKENS": Threshold(
        128,
        "the 16-bit narrow kernel at 16 heads runs from splits of this many tokens",
        "H200, both stages: 4-19% faster at all 14 H=16 shapes with splits of 128 tokens"
        ' or more ("A Gluon stage 1 for a 16-bit cache at 16 heads")',
    ),
    "NARROW_MANY_TILES_MIN_SPLIT_TOKENS": Threshold(
        64,
        "the 16-bit narrow kernel at several tiles a row runs from splits of this many",
        "H200, both stages: 1.26-1.36x at 64 tokens a split at 32 heads"
        ' ("The 16-head kernel at 32 heads", "32-head tiles at 64 and 128 heads")',
    ),
    "NARROW_WIDE_TILE_MIN_SPLIT_TOKENS": Threshold(
        128,
        "the 16-bit narrow kernel at one 32-head tile a row: the seesaw's bound, where it"
        " replaced the seesaw",
        'H200, measured from 512 tokens a split ("A 32-head tile")',
    ),
    "NARROW_BATCH_TOKENS": Threshold(
        16384,
        "at 32 and 64 heads on a 16-bit cache, steps up to it run the narrow kernel (at 32"
        " heads two 16-head tiles a row up to it, one 32-head tile above)",
        "H200, both stages: 10-27% faster at the six H=32 shapes up to it, 1-25% at the 15"
        ' H=64 ones ("The 16-head kernel at 32 heads", "32-head tiles at 64 and 128 heads")',
    ),
    "NARROW_128_HEADS_BATCH_TOKENS": Threshold(
        4096,
        "at 128 heads on a 16-bit cache, steps up to it run four 32-head tiles a row",
        "H200: 6-24% faster than the seesaw at the four such shapes, 15-19% slower at"
        ' 16384 tokens ("32-head tiles at 64 and 128 heads")',
    ),
}
SMALL_BATCH_TOKENS = THRESHOLDS["SMALL_BATCH_TOKENS"].value


def head_tile(num_heads: int, batch_tokens: int | None = None) -> int:
    """Heads per stage-1 program.

    ``num_heads`` rounded up to a power of two, in [16, 64]; but 16 when
    ``batch_tokens`` (the step's rows times its longest row's length, known at trace
    time; None when the length is known only at run time) is at most
    ``SMALL_BATCH_TOKENS``."""
    if batch_tokens is not None and batch_tokens <= SMALL_BATCH_TOKENS:
        return MIN_HEAD_TILE
    tile = MIN_HEAD_TILE
    while tile < min(num_heads, MAX_HEAD_TILE):
        tile *= 2
    return tile


def head_tiles(num_heads: int, batch_tokens: int | None = None) -> int:
    """Stage-1 programs per (row, split)."""
    return -(-num_heads // head_tile(num_heads, batch_tokens))


def programs_per_sm(num_heads: int, batch_tokens: int | None = None) -> int:
    """Stage-1 programs resident on one SM at a time (``kernels.stage1_config``):
    two with 16-head tiles (93 KB of shared memory each), one with wider tiles
    (184-221 KB), as Triton 3.6 builds them for sm_90."""
    return 2 if head_tile(num_heads, batch_tokens) <= MIN_HEAD_TILE else 1
