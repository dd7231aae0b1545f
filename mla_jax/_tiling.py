"""How stage 1 groups query heads: shared by the kernels and the split policies.

No imports: the kernel module and the split rules (which import JAX) both read it.
``head_tile`` is the one definition of the tile a step launches with; the kernel's
configuration (``kernels.stage1_config``) and the occupancy split rule
(``splits.occupancy_kv_splits``, which counts the programs a tile makes) both ask it.
"""

MAX_HEAD_TILE = 64  # 64 heads x 576 bf16 fits shared memory next to a KV tile; 128 does not
MIN_HEAD_TILE = 16  # tl.dot needs at least 16 rows
# A step whose batch holds at most this many tokens (rows x the longest row), known at
# trace time, runs 16-head tiles at any head count: there a wider tile's fixed cost per
# program outweighs its reuse of each latent tile; past it the wider tile's warpgroup
# MMA wins (docs/performance.md, "Head tiles and stage-1 configurations": the H200 A/B
# at the sweep's shapes up to this size, 0.52-0.81 of the 64-head tile's time at H
# 32-128, and the larger shapes tried).
SMALL_BATCH_TOKENS = 4096


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
