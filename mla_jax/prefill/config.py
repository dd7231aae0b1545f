"""The prefill attention kernel's tiles and launch options, and the rule that picks them.

No JAX and no Triton: the kernel module (``mla_jax.prefill.kernel``, which the Triton
interpreter loads with torch tensors) and the JAX entry point (``mla_jax.prefill.api``)
both read the one ``PrefillConfig`` a call runs with, and the heuristic here is kept
apart from the kernel so a tuning run can replace it.
"""

from __future__ import annotations

import dataclasses

MIN_DOT = 16  # tl.dot's smallest dimension


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def next_power_of_two(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def padded(width: int) -> int:
    """The tile a head dimension of ``width`` takes: its next power of two, at least
    ``MIN_DOT`` (0 stays 0: no such part)."""
    return 0 if width == 0 else max(MIN_DOT, next_power_of_two(width))


@dataclasses.dataclass(frozen=True)
class PrefillConfig:
    """Tiles and launch options of the causal flash-attention kernel.

    ``block_m``: the query rows (tokens of one sequence and head) a program takes.
    ``block_n``: the keys one step of its loop takes. ``num_warps``, ``num_stages``:
    Triton's compile options (the key and value loads are pipelined ``num_stages``
    deep).
    """

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_DOT or not _power_of_two(value):
                raise ValueError(
                    f"PrefillConfig.{name}: got {value!r}, needed a power of two >= {MIN_DOT} "
                    "(tl.dot's smallest tile)"
                )
        for name in ("num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PrefillConfig.{name}: got {value!r}, needed an int >= 1")
        if not _power_of_two(self.num_warps):
            raise ValueError(
                f"PrefillConfig.num_warps: got {self.num_warps}, needed a power of two (1-16)"
            )


def shared_bytes_estimate(config: PrefillConfig, dim_qk: int, dim_v: int, itemsize: int) -> int:
    """A rough upper bound on the kernel's shared memory: the query tile plus
    ``num_stages`` buffered key and value tiles, each at its padded width (the build
    reports the real figure; tests/kernels/test_prefill.py checks the sm_90 ones)."""
    c = config
    return itemsize * (c.block_m * dim_qk + c.num_stages * c.block_n * (dim_qk + dim_v))


SHARED_BUDGET = 200 * 1024  # under sm_90's 227 KB a block, with room for Triton's own


def default_config(
    *, tokens: int, dim_nope: int, dim_rope: int, dim_v: int, itemsize: int
) -> PrefillConfig:
    """The config a call runs with when it names none: from the prompt length, the
    head dimensions (the two parts of ``q . k`` and the value's) and the bytes a value.

    Why these (a starting point, not a measured sweep: docs/gpu/prefill's bench times
    the kernel on a GPU): 16-bit inputs take FlashAttention-2's Hopper tiles, 128 query
    rows a program over 8 warps (two warpgroups of 64 rows; the 128 x 128 float32
    accumulator is 64 registers a thread) and 64 keys a step, three steps of keys and
    values in flight: for MLA's 192-wide keys (128 + 64 rope) and 128-wide values,
    168 KB of shared memory with the query tile, and 182 registers a thread without
    spills in Triton 3.6's sm_90 build (128-key steps spill). float32 inputs (IEEE
    dots, no tensor cores: for checking rather than speed) take 64 x 16 tiles, the
    largest that build without spills at those widths. A prompt shorter than the
    query tile takes one tile of its own length rounded up to a power of two (a
    17-token prompt one 32-row tile). Wider heads drop a pipeline stage, then halve
    the key tile, until the estimate (``shared_bytes_estimate``) is under
    ``SHARED_BUDGET``.
    """
    if itemsize >= 4:
        config = PrefillConfig(block_m=64, block_n=16, num_warps=8, num_stages=2)
    else:
        config = PrefillConfig(block_m=128, block_n=64, num_warps=8, num_stages=3)
    block_m = min(config.block_m, max(MIN_DOT, next_power_of_two(tokens)))
    config = dataclasses.replace(config, block_m=block_m, block_n=min(config.block_n, block_m))
    dim_qk, dim_v = padded(dim_nope) + padded(dim_rope), padded(dim_v)
    while shared_bytes_estimate(config, dim_qk, dim_v, itemsize) > SHARED_BUDGET:
        if config.num_stages > 2:
            config = dataclasses.replace(config, num_stages=config.num_stages - 1)
        elif config.block_n > MIN_DOT:
            config = dataclasses.replace(config, block_n=config.block_n // 2)
        elif config.block_m > MIN_DOT:
            config = dataclasses.replace(config, block_m=config.block_m // 2)
        else:
            break
    return config
