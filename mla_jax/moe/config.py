"""The fused MoE's block sizes and launch options, and the rule that picks them.

No JAX and no Triton: the kernel module (``mla_jax.moe.kernel``, which the Triton
interpreter loads with torch tensors), the alignment (``mla_jax.moe.align``) and the
JAX entry point (``mla_jax.moe.api``) all read the one ``MoEConfig`` a call runs with,
and the heuristic here is kept apart from the kernel so a tuning run can replace it.
"""

from __future__ import annotations

import dataclasses

MIN_DOT = 16  # tl.dot's smallest dimension


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def next_power_of_two(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """Tiles and launch options of both MoE kernels (gate+up, then down).

    ``block_m``: (token, expert) pairs a program takes, all of one expert; each
    expert's pairs are padded to a multiple of it (``mla_jax.moe.align``).
    ``block_n``, ``block_k``: the output columns a program writes and the reduction
    step; upper bounds, each kernel taking at most its matrix's width rounded up to a
    power of two (``tile``). ``group_m``: consecutive programs walk this many blocks
    of pairs before the next column tile (``group_m`` blocks of one expert then share
    its weight tile in L2; 1: each block's column tiles in turn).
    ``num_warps``, ``num_stages``: Triton's compile options.
    """

    block_m: int = 16
    block_n: int = 64
    block_k: int = 128
    group_m: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_DOT or not _power_of_two(value):
                raise ValueError(
                    f"MoEConfig.{name}: got {value!r}, needed a power of two >= {MIN_DOT} "
                    "(tl.dot's smallest tile)"
                )
        for name in ("group_m", "num_warps", "num_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MoEConfig.{name}: got {value!r}, needed an int >= 1")
        if not _power_of_two(self.num_warps):
            raise ValueError(
                f"MoEConfig.num_warps: got {self.num_warps}, needed a power of two (1-16)"
            )

    def tile(self, k: int, n: int) -> tuple[int, int]:
        """``(BLOCK_K, BLOCK_N)`` for a ``[k, n]`` weight: the configured sizes, or the
        matrix's own width rounded up to a power of two where that is smaller (a tiny
        model's 32-wide matrix takes one 32-wide tile, not half of a 64-wide one)."""
        return (
            min(self.block_k, max(MIN_DOT, next_power_of_two(k))),
            min(self.block_n, max(MIN_DOT, next_power_of_two(n))),
        )


def max_blocks(pairs: int, num_experts: int, block_m: int) -> int:
    """The most blocks of ``block_m`` pairs ``pairs`` (token, expert) pairs make once
    each expert's are padded to a multiple of ``block_m``: each expert that has pairs
    adds at most ``block_m - 1`` of padding, and at most ``min(num_experts, pairs)``
    have any. (The padded total is a multiple of ``block_m``, so the floor is a bound.)
    At one token and top-6 that is 6 blocks, not the ``E * (block_m - 1)`` rows a bound
    over every expert would launch."""
    return (pairs + min(num_experts, pairs) * (block_m - 1)) // block_m


def shared_in_kernels(*, tokens: int) -> bool:
    """Whether ``fused_moe`` should take the shared experts too (``shared=``), rather
    than leaving them to a matmul of their own: where all ``tokens`` fit one block of
    pairs (every config's ``block_m`` is at least ``MIN_DOT``), so each shared
    expert's weights are read once, as a matmul reads them, and the launches, the
    padding a lone row needs to stay a GEMM and the add of the two outputs go away.
    Above that a shared expert's blocks would each read its weights, where one GEMM
    reads them once.
    """
    return 0 < tokens <= MIN_DOT


def mlp_slices(width: int, *, per_slice: int) -> int:
    """How many equal parts ``fused_mlp`` cuts a ``width``-wide MLP into: the divisor
    of ``width`` whose parts are nearest ``per_slice`` columns wide (the routed
    experts' width, whose one-token streams ``default_config`` is tuned for; the
    wider of two equally near). DeepSeek-V2-Lite's dense MLP, 10944 wide beside
    1408-wide experts: 8 parts of 1368."""
    divisors = [d for d in range(1, width + 1) if width % d == 0]
    return min(divisors, key=lambda d: (abs(width / d - per_slice), d))


def default_config(*, tokens: int, top_k: int, num_experts: int, itemsize: int) -> MoEConfig:
    """The config a call runs with when it names none: from the pairs an expert gets
    on average and the weights' bytes a value (``itemsize``).

    Why these (docs/gpu/moe's bench times them and a sweep of others on a GPU): a decode
    step's few pairs per expert make every weight tile read by one program, so the
    kernels are a stream of weight bytes; 16-pair blocks (the smallest ``tl.dot``) waste
    no weight traffic on padding, and 64-column tiles of a V2-Lite expert (1408 and 2048
    wide) make 132-192 programs per step at one token and top-6, about one an SM on an
    H100. The reduction step is 256 bytes of a weight row (128 bf16 values), four stages
    deep, so each program keeps 4 x 32 KB of weight tiles in flight. Prefill-sized
    problems (over 64 pairs an expert) reuse each weight tile over many pairs: 128 x 128
    tiles (two warpgroups of 64 rows on Hopper's warpgroup MMA), ``group_m`` 8 keeps an
    expert's blocks on one weight tile together in L2, and 8 warps hold the gate+up
    kernel's two 128 x 128 float32 accumulators in 128 registers a thread; they beat
    64-pair blocks at V2-Lite's 4,096-token prefill (docs/performance.md, "Prefill at
    40% of the roofline"). Between them, 32-pair blocks.
    Every config's shared memory fits sm_80 and sm_90 at 16 and 32-bit weights (the
    sm_90 builds are checked in tests/kernels/test_moe.py).
    """
    per_expert = tokens * top_k / max(num_experts, 1)
    step = max(MIN_DOT, 256 // itemsize)  # 256 bytes of a weight row
    if per_expert <= 16:
        return MoEConfig(block_m=16, block_n=64, block_k=step, num_stages=4)
    if per_expert <= 64:
        return MoEConfig(block_m=32, block_n=64, block_k=step, num_stages=3)
    return MoEConfig(
        block_m=128, block_n=128, block_k=max(MIN_DOT, step // 2), group_m=8, num_warps=8
    )
