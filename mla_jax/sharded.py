"""Sharded MLA decode over one mesh axis, through ``jax.shard_map``.

Two schemes, chosen by ``scheme=``:

``"heads"`` (tensor parallel)
  ``q`` ``[B, H, D]``, ``out``, ``lse`` and the logits buffer are split on H; the
  latent cache, block table and ``seq_lens`` are replicated (MLA's latent cache has
  no head axis, so every head shard reads all of it). H must be divisible by the
  axis size ``n``; each device runs ``mla_decode`` on its ``H / n`` heads.

``"batch"`` (data parallel)
  ``q``, ``block_table``, ``seq_lens``, ``out``, ``lse`` and the buffer's rows are
  split on B, and each device owns a page pool: ``kv_cache`` is
  ``[n * pages_per_dev, page_size, D]`` split on its page axis, so device ``i``
  holds pages ``[i * pages_per_dev, (i + 1) * pages_per_dev)``, and the block-table
  entries of device ``i``'s rows are **local** page indices in ``[0, pages_per_dev)``.
  ``sharded_append_latent`` writes new rows through such a table.

Nothing is communicated inside attention in either scheme: every device runs the
same kernel (``backend`` "xla" or "triton") on its shard and updates its own shard
of the donated logits buffer in place. Split counts are per shard: ``policy=
"occupancy"`` sees the local batch and heads, and ``max_seq_len=None`` takes the
longest local sequence. Other axes of the mesh, if any, hold replicas.
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from mla_jax._checks import check_positive
from mla_jax.buffers import (
    LOGITS_DTYPE,
    LogitsBuffer,
    gpu_sm_count,
    logits_buffer_shape,
    plan_logits_buffer,
)
from mla_jax.cache import append_latent
from mla_jax.decode import (
    Backend,
    check_buffer,
    check_scale,
    mla_decode,
    resolve_backend,
    split_max_seq_len,
    split_query,
)
from mla_jax.splits import DEFAULT_POLICY, Policy

Scheme = Literal["heads", "batch"]


def partition_specs(axis: str, scheme: Scheme) -> dict[str, P]:
    """The ``PartitionSpec`` of every argument and result of ``sharded_mla_decode``.

    Keys: ``q`` (also ``q_nope``/``q_pe`` of a pair), ``kv_cache``, ``block_table``,
    ``seq_lens``, ``logits_buffer``, ``out``, ``lse``. Use them with
    ``NamedSharding(mesh, spec)`` to place inputs where the step reads them.
    """
    if scheme == "heads":
        split, rep = P(None, axis), P()
        return dict(
            q=split,
            kv_cache=rep,
            block_table=rep,
            seq_lens=rep,
            logits_buffer=split,
            out=split,
            lse=split,
        )
    if scheme == "batch":
        return dict.fromkeys(
            ("q", "kv_cache", "block_table", "seq_lens", "logits_buffer", "out", "lse"), P(axis)
        )
    raise ValueError(f"scheme must be 'heads' or 'batch', got {scheme!r}")


def _axis_size(mesh: Mesh, axis: str, scheme: Scheme) -> int:
    partition_specs(axis, scheme)  # checks scheme
    if axis not in mesh.shape:
        raise ValueError(
            f"axis {axis!r} is not an axis of the mesh (axes: "
            f"{tuple(mesh.axis_names)}); pass one of them"
        )
    return mesh.shape[axis]


def _check_divisible(scheme: Scheme, axis: str, n: int, **sizes: tuple[int, str]) -> None:
    for name, (size, what) in sizes.items():
        if size % n:
            raise ValueError(
                f"{name}: scheme={scheme!r} splits its {what} ({size}) over mesh axis "
                f"{axis!r} of size {n}, which must divide it; use an axis of a size that "
                f"divides {size}, or pad {what} to a multiple of {n}"
            )


def _sm_count(mesh: Mesh, sm_count: int | None) -> int:
    """``sm_count``, or the multiprocessor count of this process's first mesh device
    (``DEFAULT_SM_COUNT`` where that is not a GPU)."""
    return gpu_sm_count(mesh.local_devices[0]) if sm_count is None else sm_count


def reserve_sharded_logits_buffer(
    mesh: Mesh,
    axis: str,
    scheme: Scheme,
    max_num_seqs: int,
    num_heads: int,
    max_model_len: int,
    *,
    kv_lora_rank: int = 512,
    rope_dim: int = 64,
    sm_count: int | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> LogitsBuffer:
    """The logits buffer for ``sharded_mla_decode``, reserved once and placed sharded.

    Each device's shard has the shape ``reserve_logits_buffer`` gives for its shard:
    ``"heads"``: ``[max_num_seqs, num_heads / n, S, kv_lora_rank + 1]`` with ``S``
    reserved for ``num_heads / n`` heads (it matters for ``policy="occupancy"``);
    ``"batch"``: ``[max_num_seqs / n, num_heads, S, kv_lora_rank + 1]``.

    Returns:
      A ``LogitsBuffer`` whose ``data`` is float32 ``[max_num_seqs, num_heads, S,
      kv_lora_rank + 1]`` (NaN: scratch) with a ``NamedSharding`` on ``axis`` (heads:
      dim 1; batch: dim 0).
    """
    n = _axis_size(mesh, axis, scheme)
    check_positive(max_num_seqs=max_num_seqs, num_heads=num_heads)
    if scheme == "heads":
        _check_divisible(scheme, axis, n, num_heads=(num_heads, "heads"))
    else:
        _check_divisible(scheme, axis, n, max_num_seqs=(max_num_seqs, "rows"))
    local_heads = num_heads // n if scheme == "heads" else num_heads
    # The split axis is planned for one shard's heads; the rows and heads are global.
    local_shape, settings = plan_logits_buffer(
        max_num_seqs,
        local_heads,
        max_model_len,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        sm_count=_sm_count(mesh, sm_count),
        policy=policy,
    )
    shape = logits_buffer_shape(max_num_seqs, num_heads, local_shape[2], kv_lora_rank)
    sharding = NamedSharding(mesh, partition_specs(axis, scheme)["logits_buffer"])
    # Filled on the devices, shard by shard: no host copy, and it works on a
    # multi-host mesh. NaN, as in reserve_logits_buffer: unwritten reads show up.
    data = jax.jit(lambda: jnp.full(shape, jnp.nan, LOGITS_DTYPE), out_shardings=sharding)()
    return LogitsBuffer(data, **settings)


@functools.partial(
    jax.jit,
    static_argnames=(
        "mesh",
        "axis",
        "scheme",
        "scale",
        "static_max_seq_len",
        "batch_invariant",
        "backend",
        "compute_capability",
        "fp8_mma",
    ),
    donate_argnames=("logits_buffer",),
)
def _sharded_step(
    q,
    kv_cache,
    block_table,
    seq_lens,
    logits_buffer,
    dynamic_max_seq_len,
    k_scale,
    *,
    mesh,
    axis,
    scheme,
    scale,
    static_max_seq_len,
    batch_invariant,
    backend,
    compute_capability,
    fp8_mma,
):
    n = _axis_size(mesh, axis, scheme)
    q_first = q[0] if isinstance(q, tuple) else q
    if scheme == "heads":
        _check_divisible(
            scheme,
            axis,
            n,
            q=(q_first.shape[1], "heads"),
            logits_buffer=(logits_buffer.data.shape[1], "heads"),
        )
    else:
        _check_divisible(
            scheme,
            axis,
            n,
            q=(q_first.shape[0], "batch"),
            logits_buffer=(logits_buffer.data.shape[0], "rows"),
            kv_cache=(kv_cache.shape[0], "pages"),
        )
    specs = partition_specs(axis, scheme)
    q_spec = (specs["q"], specs["q"]) if isinstance(q, tuple) else specs["q"]
    args = [q, kv_cache, block_table, seq_lens, logits_buffer]
    in_specs = [
        q_spec,
        specs["kv_cache"],
        specs["block_table"],
        specs["seq_lens"],
        specs["logits_buffer"],
    ]
    # Run-time scalars, replicated to every shard, passed on by name.
    scalars = {
        name: value
        for name, value in (("max_seq_len", dynamic_max_seq_len), ("k_scale", k_scale))
        if value is not None
    }
    args += scalars.values()
    in_specs += [P()] * len(scalars)

    def shard(q, kv_cache, block_table, seq_lens, logits_buffer, *values):
        kwargs = {"max_seq_len": static_max_seq_len, **dict(zip(scalars, values))}
        return mla_decode(
            q,
            kv_cache,
            block_table,
            seq_lens,
            logits_buffer,
            scale=scale,
            batch_invariant=batch_invariant,
            backend=backend,
            compute_capability=compute_capability,
            fp8_mma=fp8_mma,
            **kwargs,
        )

    out_specs = (specs["out"], specs["lse"], specs["logits_buffer"])
    return jax.shard_map(shard, mesh=mesh, in_specs=tuple(in_specs), out_specs=out_specs)(*args)


def sharded_mla_decode(
    mesh: Mesh,
    axis: str,
    scheme: Scheme,
    q: jax.Array | tuple[jax.Array, jax.Array],
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    logits_buffer: LogitsBuffer,
    *,
    scale: float,
    max_seq_len: int | jax.Array | None = None,
    batch_invariant: bool = False,
    k_scale: float | jax.Array | None = None,
    backend: Backend = "auto",
    compute_capability: int | None = None,
    fp8_mma: bool = False,
) -> tuple[jax.Array, jax.Array, LogitsBuffer]:
    """One MLA decode step sharded over ``mesh`` axis ``axis``; the buffer is donated.

    Args (global shapes; ``n`` = the axis size; see the module docstring):
      q: ``[B, H, kv_lora_rank + rope_dim]`` or the pair ``(q_nope, q_pe)``.
      kv_cache: ``"heads"``: ``[num_pages, page_size, D]``, replicated;
        ``"batch"``: ``[n * pages_per_dev, page_size, D]``, device ``i``'s pool is
        its ``i``-th block of pages.
      block_table: int32 ``[B, pages_per_seq]``; for ``"batch"`` the entries are
        local to the pool of the device holding the row.
      seq_lens: int32 ``[B]``.
      logits_buffer: from ``reserve_sharded_logits_buffer`` with the same mesh, axis
        and scheme; donated. Its split policy and SM count plan each shard's splits.
      scale, batch_invariant, k_scale, backend, compute_capability, fp8_mma: as
        ``mla_decode`` (``k_scale`` is replicated to every shard; ``fp8_mma``
        applies where a shard holds at least 64 heads).
      max_seq_len: a Python int (static split count, the global maximum), an int32
        scalar (replicated) or ``None``: each shard takes its own longest length.

    Returns:
      ``out [B, H, kv_lora_rank]``, ``lse`` float32 ``[B, H]`` (both sharded like
      ``q``), and the logits buffer to thread into the next step.
    """
    q_nope, q_pe = split_query(q)
    q = q_nope if q_pe is None else (q_nope, q_pe)
    check_buffer(logits_buffer)
    static, dynamic = split_max_seq_len(max_seq_len)
    return _sharded_step(
        q,
        kv_cache,
        block_table,
        seq_lens,
        logits_buffer,
        dynamic,
        None if k_scale is None else jnp.asarray(k_scale, jnp.float32),
        mesh=mesh,
        axis=axis,
        scheme=scheme,
        scale=check_scale(scale),
        static_max_seq_len=static,
        batch_invariant=bool(batch_invariant),
        backend=resolve_backend(backend, compute_capability),
        compute_capability=compute_capability,
        fp8_mma=bool(fp8_mma),
    )


def sharded_append_latent(
    mesh: Mesh,
    axis: str,
    scheme: Scheme,
    kv_cache: jax.Array,
    latent: jax.Array,
    block_table: jax.Array,
    positions: jax.Array,
) -> jax.Array:
    """``cache.append_latent`` with the layout of ``scheme``: each device writes its
    own rows into its own pool (``"batch"``), or every replica writes all rows
    (``"heads"``). ``latent`` ``[B, D]`` and ``positions`` int32 ``[B]`` are split
    like ``seq_lens``. Donate ``kv_cache`` in the enclosing jit to write in place."""
    specs = partition_specs(axis, scheme)
    n = _axis_size(mesh, axis, scheme)
    if scheme == "batch":
        _check_divisible(
            scheme,
            axis,
            n,
            latent=(latent.shape[0], "batch"),
            kv_cache=(kv_cache.shape[0], "pages"),
        )
    rows = specs["seq_lens"]
    in_specs = (specs["kv_cache"], rows, specs["block_table"], rows)
    return jax.shard_map(append_latent, mesh=mesh, in_specs=in_specs, out_specs=specs["kv_cache"])(
        kv_cache, latent, block_table, positions
    )
