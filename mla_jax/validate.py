"""Checked mode: the index checks to run before a kernel reads the paged cache.

The kernels trust ``block_table`` and ``seq_lens``: with a live page index outside
the cache, the Triton kernels read memory outside it, the xla backend silently
reads another page, and ``append_latent`` drops the row without a word. Only live
entries are checked: pages ``[0, cdiv(seq_len, page_size))`` of each row. The
entries past them are dead, never read, and may hold anything (-1, stale pages).

Two ways to run the same checks:

- Eagerly, on concrete arrays: ``validate_inputs`` copies the indices to the host
  and raises ``ValueError`` before you launch the step (it synchronises with the
  device that holds them).
- Under ``jit``: the arrays are tracers, and ``validate_inputs`` records the checks
  with ``jax.experimental.checkify``. Wrap the function you jit::

      def step(kv_cache, block_table, seq_lens, ...):
          validate_inputs(kv_cache, block_table, seq_lens)
          return mla_decode(...)

      err, out = jax.jit(checkify.checkify(step))(kv_cache, block_table, seq_lens, ...)
      err.throw()  # JaxRuntimeError with the same message

  Without ``checkify.checkify`` around it, jit refuses to lower the check. Note that
  inside one program the checks do not stop the kernels: the error is reported
  after the step ran. To stop a bad step before any kernel reads memory, run
  ``checked_validate`` as its own program and throw before launching the step.

Cost, measured on CPU (2 cores, jax 0.10.2), B = 128 rows of 256 pages (page_size 16,
32768 table entries) with positions: the eager host check takes 0.17-0.22 ms (numpy
or CPU jax arrays); ``checked_validate`` takes 0.25-0.45 ms a call, ``err.throw()``
included; inside a jitted step the checks add about 0.1 ms.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify


class _Rule(NamedTuple):
    ok: bool | jax.Array  # scalar: no entry breaks the rule
    message: str  # str.format template, filled from the first bad entry's values
    values: tuple  # scalar ints: those values


def _first(bad, xp) -> tuple:
    """Index of the first True of ``bad`` ([B] or [B, P]), as scalar ints."""
    flat = xp.argmax(bad.reshape(-1))
    return (flat,) if bad.ndim == 1 else (flat // bad.shape[1], flat % bad.shape[1])


def _rules(xp, num_pages: int, page_size: int, block_table, seq_lens, positions) -> list[_Rule]:
    """The checks in reporting order; ``xp`` is ``numpy`` (host) or ``jnp`` (traced)."""
    pages_per_seq = block_table.shape[1]
    capacity = pages_per_seq * page_size
    cap_text = (
        f"the block table's capacity of {capacity} tokens "
        f"({pages_per_seq} pages x page_size {page_size})"
    )
    rules = []

    def add(bad, message: str, value_of) -> None:
        index = _first(bad, xp)
        rules.append(_Rule(~xp.any(bad), message, (*index, *value_of(*index))))

    add(seq_lens < 0, "seq_lens[{}] = {} is negative", lambda b: (seq_lens[b],))
    add(seq_lens > capacity, "seq_lens[{}] = {} exceeds " + cap_text, lambda b: (seq_lens[b],))

    live_pages = (xp.clip(seq_lens, 0, capacity) + page_size - 1) // page_size  # [B]
    live = xp.arange(pages_per_seq)[None, :] < live_pages[:, None]
    outside = (block_table < 0) | (block_table >= num_pages)
    add(
        live & outside,
        f"block_table[{{}}, {{}}] = {{}} is outside [0, {num_pages}) "
        f"(live page of row {{}}, seq_len {{}})",
        lambda b, j: (block_table[b, j], b, seq_lens[b]),
    )

    if positions is not None:
        add(positions < 0, "positions[{}] = {} is negative", lambda b: (positions[b],))
        add(
            positions >= capacity,
            "positions[{}] = {} is past " + cap_text,
            lambda b: (positions[b],),
        )
        # The page an append writes to: append_latent would drop the row silently.
        slot = xp.clip(positions, 0, capacity - 1) // page_size
        target = xp.take_along_axis(block_table, slot[:, None], axis=1)[:, 0]
        add(
            ((target < 0) | (target >= num_pages)) & (positions >= 0) & (positions < capacity),
            f"block_table[{{}}, {{}}] = {{}} is outside [0, {num_pages}) "
            "(the page positions[{}] = {} writes to)",
            lambda b: (slot[b], target[b], b, positions[b]),
        )
    return rules


def _check_shapes(kv_cache, block_table, seq_lens, positions) -> None:
    def integer(x) -> bool:
        return jnp.issubdtype(x.dtype, jnp.integer)

    if len(kv_cache.shape) != 3:
        raise ValueError(
            f"kv_cache: got shape {list(kv_cache.shape)}, needed [num_pages, page_size, width]"
        )
    if block_table.ndim != 2 or not integer(block_table) or block_table.shape[1] < 1:
        raise ValueError(
            f"block_table: got {block_table.dtype}{list(block_table.shape)}, "
            "needed integer [B, pages_per_seq >= 1]"
        )
    batch = block_table.shape[0]
    for name, x in (("seq_lens", seq_lens), ("positions", positions)):
        if x is not None and (x.shape != (batch,) or not integer(x)):
            raise ValueError(
                f"{name}: got {x.dtype}{list(x.shape)}, needed integer "
                f"[{batch}] (block_table is {list(block_table.shape)})"
            )


def validate_inputs(
    kv_cache: jax.Array | jax.ShapeDtypeStruct,
    block_table: jax.Array | np.ndarray,
    seq_lens: jax.Array | np.ndarray,
    *,
    positions: jax.Array | np.ndarray | None = None,
) -> None:
    """Checks the indices a decode step (and an append) will follow.

    Args:
      kv_cache: ``[num_pages, page_size, width]``; only its shape is used.
      block_table: integer ``[B, pages_per_seq]``; live entries must lie in
        ``[0, num_pages)``, dead ones are not looked at.
      seq_lens: integer ``[B]``, each in ``[0, pages_per_seq * page_size]``.
      positions: integer ``[B]``, the token index ``append_latent`` writes each row
        at: in ``[0, pages_per_seq * page_size)``, on a page inside the cache.

    Raises:
      ValueError: on concrete arrays, for the first bad entry, naming its row and
        value, e.g. ``block_table[3, 7] = 912 is outside [0, 800) (live page of row
        3, seq_len 450)``; also for shapes it cannot check.

    On tracers (inside ``jit``) the checks are ``checkify.check`` calls instead:
    the enclosing function must be wrapped in ``checkify.checkify`` (module doc).
    """
    _check_shapes(kv_cache, block_table, seq_lens, positions)
    if block_table.shape[0] == 0:
        return
    num_pages, page_size = kv_cache.shape[:2]
    arrays = (block_table, seq_lens, positions)
    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        for rule in _rules(
            jnp, num_pages, page_size, *(None if x is None else jnp.asarray(x) for x in arrays)
        ):
            checkify.check(rule.ok, rule.message, *rule.values)
        return
    host = [None if x is None else np.asarray(x) for x in arrays]
    for rule in _rules(np, num_pages, page_size, *host):
        if not rule.ok:
            raise ValueError(rule.message.format(*(int(v) for v in rule.values)))


checked_validate = jax.jit(checkify.checkify(validate_inputs))
"""``validate_inputs`` as its own jitted program: ``err, _ = checked_validate(kv_cache,
block_table, seq_lens, positions=positions)``, then ``err.throw()``. The cache is an
unused argument: jit prunes it, nothing of it is read."""
