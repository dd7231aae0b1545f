"""``skinny_matmul``'s tiles and launch options, and the rule that picks them.

No JAX and no Triton: the kernel module and the JAX entry point read the one
``SkinnyConfig`` a call runs with; the heuristic is kept apart from the kernel so a
tuning run can replace it.
"""

from __future__ import annotations

import dataclasses

MIN_DOT = 16  # tl.dot's smallest dimension
MAX_ROWS = 16  # the rows a call takes: a decode step's (one tl.dot tile of rows)
PROGRAMS = 264  # two programs an SM of a 132-SM Hopper (each holds 80 KB of tiles)


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def next_power_of_two(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class SkinnyConfig:
    """``block_n``, ``block_k``: a program's output columns and reduction step (upper
    bounds: a narrower matrix takes its width rounded up to a power of two, ``tile``).
    ``splits``: slices of the reduction, one program each per column tile, their
    float32 partials summed by the caller. ``num_warps``, ``num_stages``: Triton's."""

    block_n: int = 64
    block_k: int = 128
    splits: int = 1
    num_warps: int = 4
    num_stages: int = 4

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_DOT or not _power_of_two(value):
                raise ValueError(
                    f"SkinnyConfig.{name}: got {value!r}, needed a power of two >= {MIN_DOT} "
                    "(tl.dot's smallest tile)"
                )
        for name in ("splits", "num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SkinnyConfig.{name}: got {value!r}, needed an int >= 1")
        if not _power_of_two(self.num_warps):
            raise ValueError(
                f"SkinnyConfig.num_warps: got {self.num_warps}, needed a power of two (1-16)"
            )

    def tile(self, k: int, n: int) -> tuple[int, int]:
        """``(BLOCK_K, BLOCK_N)`` for a ``[k, n]`` weight."""
        return (
            min(self.block_k, max(MIN_DOT, next_power_of_two(k))),
            min(self.block_n, max(MIN_DOT, next_power_of_two(n))),
        )

    @staticmethod
    def block_m(m: int) -> int:
        """The rows of a program's tile: ``m`` rounded up to a ``tl.dot`` tile."""
        return max(MIN_DOT, next_power_of_two(m))


def default_config(*, groups: int, k: int, n: int) -> SkinnyConfig:
    """The config a call runs with when it names none: 64 columns (128 bytes of a
    bf16 weight row, a full cache line) by 128-deep steps, and the reduction split
    until the column tiles times the splits reach ``PROGRAMS``: a decode step's
    matrices are 9 to 48 column tiles wide, which alone would leave most SMs idle
    with little of the weight in flight."""
    base = SkinnyConfig()
    block_k, block_n = base.tile(k, n)
    tiles = groups * -(-n // block_n)
    steps = -(-k // block_k)
    splits = 1
    while splits * 2 <= steps and tiles * splits * 2 <= PROGRAMS:
        splits *= 2
    return dataclasses.replace(base, splits=splits)
