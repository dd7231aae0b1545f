"""A multi-layer MLA decode loop in one ``lax.scan``, over an explicit state.

Every step runs each layer (MLA attention plus a residual) on the previous step's
normalised output. The state (per-layer caches, the shared block table and logits
buffer, the positions) is a pytree the jitted loop donates, so the caches and the
buffer are updated in place, and the split count is computed at run time, so one
executable serves every length the state reaches.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mla_jax._checks import check_array, narrow_int32, positive_int, shape_error
from mla_jax.buffers import LogitsBuffer, reserve_logits_buffer
from mla_jax.cache import new_block_table
from mla_jax.decode import Backend
from mla_jax.layer import MLAConfig, MLAParams, mla_decode_layer
from mla_jax.splits import DEFAULT_POLICY, Policy
from mla_jax.validate import validate_inputs


class DecodeState(NamedTuple):
    """What a decode step reads and returns; ``B`` = num_seqs."""

    kv_caches: tuple[jax.Array, ...]  # per layer [num_pages, page_size, latent_dim]
    block_table: jax.Array  # int32 [B, pages_per_seq], shared by the layers
    logits_buffer: LogitsBuffer  # shared: each layer's decode writes before it reads
    positions: jax.Array  # int32 [B], the next token's index


def rms_normalise(x: jax.Array, eps: float) -> jax.Array:
    """RMS normalisation without a weight: what each layer reads, and what
    ``decode_loop`` feeds the next step from this step's output."""
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def init_decode_state(
    config: MLAConfig,
    num_layers: int,
    num_seqs: int,
    max_len: int,
    page_size: int,
    *,
    sm_count: int | None = None,
    key: jax.Array,
    prompt_lens: Sequence[int] | np.ndarray,
    dtype: jnp.dtype = jnp.float32,
    policy: Policy = DEFAULT_POLICY,
) -> DecodeState:
    """A state whose caches hold ``prompt_lens`` tokens of random latents.

    Every cache row is filled with standard-normal values (rows past a prompt are
    overwritten by the step that appends them, before any read). All layers share
    one shuffled block table; the logits buffer is reserved for ``max_len``.

    Args:
      max_len: capacity per sequence; the prompt plus every decoded token must fit.
      prompt_lens: ``[num_seqs]`` ints in ``[0, max_len)``.
      dtype: the caches' dtype (the attention dtype).
      sm_count, policy: what the logits buffer is reserved with (the steps read
        both from the buffer); ``sm_count=None`` is the GPU's, or 132 without one
        (``mla_jax.buffers.gpu_sm_count``).
    """
    num_layers = positive_int("num_layers", num_layers)
    lens = np.asarray(prompt_lens)
    if (
        lens.shape != (num_seqs,)
        or not np.issubdtype(lens.dtype, np.integer)
        or (lens.min() < 0 or lens.max() >= max_len)
    ):
        raise ValueError(
            f"prompt_lens: got {lens.dtype}{list(lens.shape)} {lens.tolist()}, "
            f"needed {num_seqs} ints in [0, max_len={max_len})"
        )
    table_key, *layer_keys = jax.random.split(key, num_layers + 1)
    block_table = new_block_table(num_seqs, max_len, page_size, key=table_key)
    shape = (block_table.size, page_size, config.latent_dim)
    return DecodeState(
        kv_caches=tuple(jax.random.normal(k, shape, dtype) for k in layer_keys),
        block_table=block_table,
        logits_buffer=reserve_logits_buffer(
            num_seqs,
            config.num_heads,
            max_len,
            kv_lora_rank=config.kv_lora_rank,
            rope_dim=config.qk_rope_head_dim,
            sm_count=sm_count,
            policy=policy,
        ),
        positions=jnp.asarray(lens, jnp.int32),
    )


def decode_step(
    params_list: Sequence[MLAParams],
    config: MLAConfig,
    x: jax.Array,
    state: DecodeState,
    *,
    backend: Backend = "auto",
) -> tuple[jax.Array, DecodeState]:
    """One token through every layer: ``h += mla_layer(rms(h))``.

    Args:
      x: ``[B, hidden]``.

    Returns:
      ``y [B, hidden]`` and the state with one more token per sequence.
    """
    if len(params_list) != len(state.kv_caches):
        raise ValueError(
            f"params_list: got {len(params_list)} layers, needed "
            f"{len(state.kv_caches)} to match state.kv_caches"
        )
    h, buffer, caches = x, state.logits_buffer, []
    for params, cache in zip(params_list, state.kv_caches):
        attn, cache, buffer = mla_decode_layer(
            params,
            config,
            rms_normalise(h, config.rms_norm_eps),
            cache,
            state.block_table,
            state.positions,
            buffer,
            backend=backend,
        )
        h = h + attn
        caches.append(cache)
    return h, DecodeState(tuple(caches), state.block_table, buffer, state.positions + 1)


@functools.partial(
    jax.jit,
    static_argnames=("config", "num_steps", "backend", "unroll"),
    donate_argnames=("state",),
)
def _scan_steps(params_list, config, x0, state, num_steps, *, backend, unroll):
    def body(carry, _):
        x, state = carry
        y, state = decode_step(params_list, config, x, state, backend=backend)
        return (rms_normalise(y, config.rms_norm_eps), state), y

    (_, state), outputs = lax.scan(body, (x0, state), length=num_steps, unroll=unroll)
    return outputs, state


def decode_loop(
    params_list: Sequence[MLAParams],
    config: MLAConfig,
    x0: jax.Array,
    state: DecodeState,
    num_steps: int,
    *,
    backend: Backend = "auto",
    unroll: int = 1,
    validate: bool = False,
) -> tuple[jax.Array, DecodeState]:
    """``num_steps`` decode steps in one jitted ``lax.scan``; ``state`` is donated.

    Step ``t``'s input is step ``t-1``'s output, RMS-normalised (``x0`` for the
    first). The caller keeps ``positions + num_steps <= max_len``: a row past the
    block table is dropped, not written (``validate=True`` checks it).

    Args:
      params_list: one ``MLAParams`` per layer, as many as ``state.kv_caches``.
      x0: ``[B, hidden]``.
      unroll: steps per loop trip (``lax.scan``'s ``unroll``). On a GPU each trip of
        XLA's while loop waits on the host; at B=1, H=128, L=4096 on the H200 one step
        took 28 us rolled and 22 us with ``unroll=8`` (``scripts/step_timing.py``;
        docs/performance.md, "Small batches and the scan step"),
        for a longer compilation.
      validate: before anything runs, check on the host that every position the
        loop writes, ``positions`` to ``positions + num_steps - 1``, lies inside the
        block table and on a page of every layer's cache (``validate_inputs``): a
        ValueError names the layer and the first request that does not. Needs
        concrete arrays (not under ``jit``).

    ``state.block_table`` and ``state.positions`` wider than int32 are narrowed
    after checking their values fit.

    Returns:
      ``outputs [num_steps, B, hidden]`` (each step's output before normalising)
      and the advanced state; the one passed in is deleted.
    """
    num_steps = positive_int("num_steps", num_steps)
    for name, array in (
        ("state.block_table", state.block_table),
        ("state.positions", state.positions),
    ):
        check_array(name, array)
    state = state._replace(
        block_table=narrow_int32("state.block_table", state.block_table),
        positions=narrow_int32("state.positions", state.positions),
    )
    check_array("x0", x0)
    batch = state.positions.shape[0] if state.positions.ndim == 1 else None
    if x0.shape != (batch, config.hidden_size) or not jnp.issubdtype(x0.dtype, jnp.floating):
        raise shape_error(
            "x0", f"{x0.dtype}{list(x0.shape)}", f"a float [{batch}, {config.hidden_size}]"
        )
    if validate:
        if len(state.kv_caches) != len(params_list):
            raise ValueError(
                f"params_list: got {len(params_list)} layers, needed "
                f"{len(state.kv_caches)} to match state.kv_caches"
            )
        # Positions only grow, so the last step's length and append position bound
        # every page and slot the loop touches. Only a cache's shape is read, and the
        # layers' caches may differ in pages.
        positions = np.asarray(state.positions).astype(np.int64)  # + num_steps may pass int32
        if (positions < 0).any():
            # The first step writes at positions itself: a negative one is dropped.
            b = int(np.argmax(positions < 0))
            raise ValueError(f"state.positions[{b}] = {positions[b]}, needed >= 0")
        for layer, cache in enumerate(state.kv_caches):
            try:
                validate_inputs(
                    cache,
                    state.block_table,
                    positions + num_steps,
                    positions=positions + num_steps - 1,
                )
            except ValueError as e:
                raise ValueError(
                    f"state.kv_caches[{layer}], seq_lens = state.positions + num_steps "
                    f"({num_steps}): {e}"
                ) from None
    return _scan_steps(params_list, config, x0, state, num_steps, backend=backend, unroll=unroll)


# One executable serves every call with the same static arguments; the count of
# them is the jitted scan's (the demo and the tests read it).
decode_loop._cache_size = _scan_steps._cache_size  # type: ignore[attr-defined]
