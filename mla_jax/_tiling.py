"""How stage 1 groups query heads: shared by the kernels and the split policies.

No imports: the kernel module and the split rules (which import JAX) both read it.
"""

MAX_HEAD_TILE = 64  # 64 heads x 576 bf16 fits shared memory next to a KV tile; 128 does not
MIN_HEAD_TILE = 16  # tl.dot needs at least 16 rows


def head_tile(num_heads: int) -> int:
    """Heads per stage-1 program: ``num_heads`` rounded up to a power of two, in [16, 64]."""
    tile = MIN_HEAD_TILE
    while tile < min(num_heads, MAX_HEAD_TILE):
        tile *= 2
    return tile


def head_tiles(num_heads: int) -> int:
    """Stage-1 programs per (row, split)."""
    return -(-num_heads // head_tile(num_heads))


def programs_per_sm(num_heads: int) -> int:
    """Stage-1 programs resident on one SM at a time (``kernels.stage1_config``):
    two with 16-head tiles (93 KB of shared memory each), one with wider tiles
    (184-221 KB), as Triton 3.6 builds them for sm_90."""
    return 2 if head_tile(num_heads) <= MIN_HEAD_TILE else 1
